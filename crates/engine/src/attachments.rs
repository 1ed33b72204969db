//! Attachments (issue 42): files a user sends with a prompt, uploaded first or inline.
//!
//! The bytes live in the data directory as blobs named by their SHA-256
//! (`DATA_DIR/attachments/blobs/ab/abcd…`), so the same file sent twice is kept once; the
//! store's rows (see [`crate::store::Attachments`]) say who holds which blob and in
//! which session. An upload is written to a temporary file while it is hashed and
//! counted, so nothing is held whole in memory and a body past its limit stops being
//! read at once; only a complete, accepted file is moved into place, and its row is
//! written after the blob is there, so a refused or broken upload leaves nothing behind
//! (a crash between the two leaves at worst a temporary file or a blob no row names,
//! both removed by [`Attachments::sweep`]).
//!
//! What a file is comes from its bytes, never from what the sender says: the four image
//! types both providers read and PDF by their magic numbers, and anything that is UTF-8
//! throughout (SVG, HTML and XML included) as text. Everything else is refused.

use crate::engine::Engine;
use crate::error::{EngineError, Result};
use crate::model::Model;
use crate::store::Attachment;
use bytes::Bytes;
use futures::{Stream, StreamExt};
use sha2::{Digest, Sha256};
use spool_protocol::api::AttachmentInfo;
use spool_protocol::{AttachmentId, Content, SessionId, UserId};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::io::AsyncWriteExt;

/// What a user may send, per file, per prompt and in all (`[limits]` in the config).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttachmentLimits {
    /// Most bytes of one uploaded file (`upload_bytes`).
    pub upload_bytes: u64,
    /// Most bytes of one file sent inline as a data URL, decoded (`inline_file_bytes`).
    pub inline_file_bytes: u64,
    /// Most files in one prompt (`files_per_prompt`).
    pub files_per_prompt: usize,
    /// Most bytes of all files of one prompt (`prompt_file_bytes`); base64 of it stays
    /// under Anthropic's 32 MB per request.
    pub prompt_file_bytes: u64,
    /// Most bytes of attachments one user holds (`attachment_bytes_per_user`); a file
    /// held twice counts twice.
    pub bytes_per_user: u64,
    /// How long an upload no prompt used is kept (`upload_ttl_hours`): a composer
    /// closed with files attached leaves them, and [`Attachments::sweep`] removes them
    /// once they are this old.
    pub upload_ttl: Duration,
}

impl Default for AttachmentLimits {
    fn default() -> Self {
        Self {
            upload_bytes: 20 << 20,
            inline_file_bytes: 4 << 20,
            files_per_prompt: 10,
            prompt_file_bytes: 24 << 20,
            bytes_per_user: 1 << 30,
            upload_ttl: Duration::from_secs(24 * 3600),
        }
    }
}

/// The media types Spool takes, for error messages.
const ACCEPTED: &str = "PNG, JPEG, GIF or WebP images, PDF, or UTF-8 text";

/// How much of a file's start is kept to sniff its type from.
const SNIFF_BYTES: usize = 512;

/// Text types a sender may name for a UTF-8 file and keep; any other text is
/// `text/plain` (so SVG, HTML and XML are never served or sent as active content).
const TEXT_TYPES: &[&str] = &["text/markdown", "text/csv", "application/json", "text/x-log"];

/// What the bytes are, by their start (and whether they were all UTF-8 without NUL).
pub fn sniff(head: &[u8], text: bool, declared: Option<&str>) -> Option<String> {
    let by_magic = if head.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if head.starts_with(&[0xFF, 0xD8, 0xFF]) {
        Some("image/jpeg")
    } else if head.starts_with(b"GIF87a") || head.starts_with(b"GIF89a") {
        Some("image/gif")
    } else if head.len() >= 12 && &head[..4] == b"RIFF" && &head[8..12] == b"WEBP" {
        Some("image/webp")
    } else if head.starts_with(b"%PDF-") {
        Some("application/pdf")
    } else {
        None
    };
    if let Some(found) = by_magic {
        return Some(found.to_owned());
    }
    if !text {
        return None;
    }
    let declared = declared.map(|d| d.split(';').next().unwrap_or("").trim().to_ascii_lowercase());
    Some(match declared {
        Some(d) if TEXT_TYPES.contains(&d.as_str()) => d,
        _ => "text/plain".to_owned(),
    })
}

/// A file name fit to keep and show: its last path segment, without control or
/// direction-changing characters, at most 255 bytes; `file` when nothing is left.
pub fn sanitize_name(name: &str) -> String {
    let last = name.rsplit(['/', '\\']).next().unwrap_or("");
    let bidi = |c: char| matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200E}' | '\u{200F}');
    let kept: String = last.chars().filter(|c| !c.is_control() && !bidi(*c)).collect();
    let mut kept = kept.trim().trim_matches('.').to_owned();
    if kept.len() > 255 {
        let mut end = 255;
        while !kept.is_char_boundary(end) {
            end -= 1;
        }
        kept.truncate(end);
    }
    if kept.is_empty() { "file".to_owned() } else { kept }
}

/// Where the blobs are: `DATA_DIR/attachments`.
#[derive(Clone, Debug)]
pub struct BlobDir {
    root: PathBuf,
}

/// Held while a blob is moved into place and its row written, and while a blob is
/// checked for rows and unlinked: so a new upload of the same bytes never loses its
/// blob to a session's deletion running at the same moment.
static BLOBS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

impl BlobDir {
    pub fn under(data_dir: &Path) -> BlobDir {
        BlobDir { root: data_dir.join("attachments") }
    }

    pub fn blob(&self, sha256: &str) -> PathBuf {
        self.root.join("blobs").join(&sha256[..2]).join(sha256)
    }

    fn tmp(&self) -> PathBuf {
        self.root.join("tmp")
    }

    /// A blob's bytes.
    pub async fn read(&self, sha256: &str) -> std::io::Result<Bytes> {
        tokio::fs::read(self.blob(sha256)).await.map(Bytes::from)
    }
}

/// A file being received: written to a temporary file while hashed, counted and
/// checked for text.
struct Receiving {
    path: PathBuf,
    file: tokio::fs::File,
    hasher: Sha256,
    size: u64,
    head: Vec<u8>,
    /// Still UTF-8 without NUL so far; `tail` is an incomplete character at a chunk's end.
    text: bool,
    tail: Vec<u8>,
}

impl Receiving {
    async fn take(&mut self, chunk: &[u8]) -> std::io::Result<()> {
        self.hasher.update(chunk);
        self.size += chunk.len() as u64;
        if self.head.len() < SNIFF_BYTES {
            let room = SNIFF_BYTES - self.head.len();
            self.head.extend_from_slice(&chunk[..room.min(chunk.len())]);
        }
        if self.text {
            let mut joined = std::mem::take(&mut self.tail);
            joined.extend_from_slice(chunk);
            match std::str::from_utf8(&joined) {
                Ok(s) => self.text = !s.contains('\0'),
                // Cut inside a character: the rest comes with the next chunk.
                Err(e) if e.error_len().is_none() => {
                    let valid = &joined[..e.valid_up_to()];
                    self.text = !valid.contains(&0);
                    self.tail = joined[e.valid_up_to()..].to_vec();
                }
                Err(_) => self.text = false,
            }
        }
        self.file.write_all(chunk).await
    }
}

/// `engine.attachments()`: storing, reading, sending and removing attachments.
#[derive(Clone, Copy)]
pub struct Attachments<'a> {
    pub(crate) engine: &'a Engine,
}

impl Attachments<'_> {
    fn blobs(&self) -> Result<BlobDir> {
        self.engine.inner.env.blobs().ok_or_else(|| EngineError::Unavailable {
            code: "attachments_unavailable",
            message: "this server has no data directory to keep attachments in".into(),
        })
    }

    pub fn limits(&self) -> AttachmentLimits {
        self.engine.inner.config.attachments
    }

    /// Stores an uploaded file read from `body`, at most `[limits] upload_bytes`. Past
    /// the limit the body is read no further and nothing is kept.
    pub async fn upload<S, E>(
        &self,
        owner: &UserId,
        name: &str,
        declared: Option<&str>,
        body: S,
    ) -> Result<AttachmentInfo>
    where
        S: Stream<Item = std::result::Result<Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        let limit = self.limits().upload_bytes;
        self.receive(owner, name, declared, body, limit, "file_too_large").await
    }

    /// Stores a file sent inline (a data URL's bytes), at most `[limits] inline_file_bytes`.
    pub async fn put(
        &self,
        owner: &UserId,
        name: &str,
        declared: Option<&str>,
        bytes: Bytes,
    ) -> Result<AttachmentInfo> {
        let limit = self.limits().inline_file_bytes;
        let body = futures::stream::iter([Ok::<_, std::convert::Infallible>(bytes)]);
        self.receive(owner, name, declared, body, limit, "inline_file_too_large").await
    }

    async fn receive<S, E>(
        &self,
        owner: &UserId,
        name: &str,
        declared: Option<&str>,
        mut body: S,
        limit: u64,
        too_large: &'static str,
    ) -> Result<AttachmentInfo>
    where
        S: Stream<Item = std::result::Result<Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        let blobs = self.blobs()?;
        let tmp = blobs.tmp();
        tokio::fs::create_dir_all(&tmp).await.map_err(io_error)?;
        let path = tmp.join(AttachmentId::new().as_str());
        let file = tokio::fs::File::create(&path).await.map_err(io_error)?;
        let mut receiving =
            Receiving { path, file, hasher: Sha256::new(), size: 0, head: Vec::new(), text: true, tail: Vec::new() };
        let received = async {
            while let Some(chunk) = body.next().await {
                let chunk =
                    chunk.map_err(|e| EngineError::invalid("upload_failed", format!("the upload broke off: {e}")))?;
                if receiving.size + chunk.len() as u64 > limit {
                    return Err(EngineError::TooLarge {
                        code: too_large,
                        message: format!("the file is over the limit of {limit} bytes"),
                    });
                }
                receiving.take(&chunk).await.map_err(io_error)?;
            }
            receiving.file.sync_all().await.map_err(io_error)?;
            Ok(())
        }
        .await;
        // The temporary file goes whatever happens next: renamed into place, or removed.
        let outcome = match received {
            Ok(()) => self.keep(owner, name, declared, &blobs, &receiving).await,
            Err(e) => Err(e),
        };
        let _ = tokio::fs::remove_file(&receiving.path).await;
        outcome
    }

    async fn keep(
        &self,
        owner: &UserId,
        name: &str,
        declared: Option<&str>,
        blobs: &BlobDir,
        received: &Receiving,
    ) -> Result<AttachmentInfo> {
        let text = received.text && received.tail.is_empty();
        let Some(media_type) = sniff(&received.head, text, declared) else {
            return Err(EngineError::invalid(
                "unsupported_file_type",
                format!("Spool takes {ACCEPTED}; these bytes are none of them"),
            ));
        };
        let held = self.engine.store().attachment_bytes(owner).await?;
        let quota = self.limits().bytes_per_user;
        if held + received.size > quota {
            return Err(EngineError::TooMany {
                code: "attachment_quota",
                message: format!(
                    "your attachments hold {held} bytes; this file's {} would pass your limit of {quota}",
                    received.size
                ),
            });
        }
        let sha256 = hex(&received.hasher.clone().finalize());
        let attachment = Attachment {
            id: AttachmentId::new(),
            owner_id: owner.clone(),
            session_id: None,
            sha256: sha256.clone(),
            size: received.size,
            media_type,
            name: sanitize_name(name),
            created_at: self.engine.inner.env.clock.now_ms(),
        };
        let target = blobs.blob(&sha256);
        let _blobs = BLOBS.lock().await;
        if tokio::fs::try_exists(&target).await.map_err(io_error)? {
            // The same bytes are kept already: this upload's copy is dropped by the caller.
        } else {
            let shard = target.parent().expect("a blob path has a shard");
            tokio::fs::create_dir_all(shard).await.map_err(io_error)?;
            tokio::fs::rename(&received.path, &target).await.map_err(io_error)?;
        }
        self.engine.store().insert_attachment(&attachment).await?;
        Ok(info(&attachment))
    }

    /// One of `owner`'s attachments and where its bytes are; another user's is not found.
    pub async fn open(&self, owner: &UserId, id: &AttachmentId) -> Result<(AttachmentInfo, PathBuf)> {
        let attachment = self.owned(owner, id).await?;
        let path = self.blobs()?.blob(&attachment.sha256);
        Ok((info(&attachment), path))
    }

    async fn owned(&self, owner: &UserId, id: &AttachmentId) -> Result<Attachment> {
        match self.engine.store().get_attachment(id).await? {
            Some(a) if &a.owner_id == owner => Ok(a),
            _ => Err(EngineError::NotFound("attachment")),
        }
    }

    /// Refuses a prompt's files that are not `owner`'s, or that `model` cannot read.
    pub(crate) async fn check_readable(&self, owner: &UserId, ids: &[AttachmentId], model: &dyn Model) -> Result<()> {
        let inputs = model.inputs();
        for id in ids {
            let file = self.owned(owner, id).await?;
            if !inputs.reads(&file.media_type) {
                let (code, what) = if file.media_type == "application/pdf" {
                    ("model_cannot_read_pdf", "PDF documents")
                } else {
                    ("model_cannot_read_images", "images")
                };
                return Err(EngineError::invalid(
                    code,
                    format!(
                        "the model {} does not read {what}, so {} cannot go to it; pick a model that does",
                        model.name(),
                        file.name
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The files of a prompt to `session` (run now, or queued), as its user message will
    /// hold them: checked against the prompt's limits and bound to the session (a file
    /// another session holds already gets a row of its own here, so deleting either
    /// session leaves the other whole).
    pub(crate) async fn for_prompt(
        &self,
        owner: &UserId,
        session: &SessionId,
        ids: &[AttachmentId],
    ) -> Result<Vec<AttachmentInfo>> {
        let limits = self.limits();
        if ids.len() > limits.files_per_prompt {
            return Err(EngineError::invalid(
                "too_many_files",
                format!("a prompt takes at most {} files; this one has {}", limits.files_per_prompt, ids.len()),
            ));
        }
        let mut files = Vec::with_capacity(ids.len());
        for id in ids {
            files.push(self.owned(owner, id).await?);
        }
        let total: u64 = files.iter().map(|f| f.size).sum();
        if total > limits.prompt_file_bytes {
            return Err(EngineError::TooLarge {
                code: "prompt_files_too_large",
                message: format!(
                    "the prompt's files are {total} bytes together; the limit is {}",
                    limits.prompt_file_bytes
                ),
            });
        }
        let mut bound = Vec::with_capacity(files.len());
        for mut file in files {
            if file.session_id.as_ref() != Some(session)
                && !self.engine.store().bind_attachment(&file.id, session).await?
            {
                // Held by another session, or deleted since it was read (its owner's ✕,
                // or the expiry): a row of this session's own, under the blobs' lock so
                // the blob cannot go in between, and only while a row still names it.
                let _blobs = BLOBS.lock().await;
                if self.engine.store().get_attachment(&file.id).await?.is_none() {
                    return Err(EngineError::NotFound("attachment"));
                }
                file = Attachment {
                    id: AttachmentId::new(),
                    session_id: Some(session.clone()),
                    created_at: self.engine.inner.env.clock.now_ms(),
                    ..file
                };
                self.engine.store().insert_attachment(&file).await?;
            }
            bound.push(info(&file));
        }
        Ok(bound)
    }

    /// Removes one of `owner`'s uploads that no prompt has used yet (the composer's ✕),
    /// and its blob when no other row names it. One a prompt sent is 409
    /// `attachment_in_use` (it goes with its session); another user's, or an unknown
    /// id, is not found.
    pub async fn delete_upload(&self, owner: &UserId, id: &AttachmentId) -> Result<()> {
        let file = self.owned(owner, id).await?;
        let in_use = || EngineError::Conflict {
            code: "attachment_in_use",
            message: format!(
                "{} was sent with a prompt: it stays with that session and goes when the session is deleted",
                file.name
            ),
        };
        if file.session_id.is_some() {
            return Err(in_use());
        }
        if !self.engine.store().delete_unbound_attachment(id).await? {
            // A prompt bound it, or another request deleted it, since it was read.
            return match self.engine.store().get_attachment(id).await? {
                Some(_) => Err(in_use()),
                None => Err(EngineError::NotFound("attachment")),
            };
        }
        self.release(vec![file.sha256.clone()]).await;
        Ok(())
    }

    /// Gives `session` a row of its own for every file in `messages` (a fork's copied
    /// history): its blobs then stay while the session does, whatever becomes of the
    /// session the messages came from.
    pub(crate) async fn hold_for(
        &self,
        owner: &UserId,
        session: &SessionId,
        messages: &[spool_protocol::IndexedMessage],
    ) -> Result<()> {
        for file in messages.iter().flat_map(|m| m.message.files()) {
            let Content::File { name, media_type, size, sha256, .. } = file else { continue };
            let row = Attachment {
                id: AttachmentId::new(),
                owner_id: owner.clone(),
                session_id: Some(session.clone()),
                sha256: sha256.clone(),
                size: *size,
                media_type: media_type.clone(),
                name: name.clone(),
                created_at: self.engine.inner.env.clock.now_ms(),
            };
            let _blobs = BLOBS.lock().await;
            self.engine.store().insert_attachment(&row).await?;
        }
        Ok(())
    }

    /// Removes the blobs among `shas` that no row names any more (after their session
    /// was deleted).
    pub(crate) async fn release(&self, shas: Vec<String>) {
        let Ok(blobs) = self.blobs() else { return };
        for sha in shas {
            let _blobs = BLOBS.lock().await;
            match self.engine.store().blob_in_use(&sha).await {
                Ok(false) => {
                    if let Err(error) = tokio::fs::remove_file(blobs.blob(&sha)).await
                        && error.kind() != std::io::ErrorKind::NotFound
                    {
                        tracing::warn!(%sha, %error, "cannot remove an attachment's blob");
                    }
                }
                Ok(true) => {}
                Err(error) => tracing::warn!(%sha, %error, "cannot tell whether a blob is still used; kept"),
            }
        }
    }

    /// Removes uploads never sent once they are older than `[limits] upload_ttl_hours`
    /// (by the engine's clock), and what a crash may have left: temporary files, and
    /// blobs no row names (a session deleted with its project, whose blobs nobody
    /// released one by one). Runs at start and hourly.
    pub async fn sweep(&self) {
        let Ok(blobs) = self.blobs() else { return };
        let ttl = crate::clock::millis(self.limits().upload_ttl);
        let before = self.engine.inner.env.clock.now_ms().saturating_sub(ttl);
        match self.engine.store().delete_unbound_attachments_before(before).await {
            // Their blobs go with the others below, once no row names them.
            Ok(expired) if !expired.is_empty() => tracing::info!(uploads = expired.len(), "expired uploads never sent"),
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "cannot remove expired uploads; kept until the next sweep"),
        }
        if let Ok(mut tmp) = tokio::fs::read_dir(blobs.tmp()).await {
            while let Ok(Some(entry)) = tmp.next_entry().await {
                // Only files a while old: an upload may be writing one right now.
                let old = entry
                    .metadata()
                    .await
                    .and_then(|m| m.modified())
                    .is_ok_and(|t| t.elapsed().is_ok_and(|age| age.as_secs() > 3600));
                if old {
                    let _ = tokio::fs::remove_file(entry.path()).await;
                }
            }
        }
        let mut found = Vec::new();
        if let Ok(mut shards) = tokio::fs::read_dir(blobs.root.join("blobs")).await {
            while let Ok(Some(shard)) = shards.next_entry().await {
                if let Ok(mut files) = tokio::fs::read_dir(shard.path()).await {
                    while let Ok(Some(file)) = files.next_entry().await {
                        found.extend(file.file_name().to_str().filter(|n| n.len() == 64).map(str::to_owned));
                    }
                }
            }
        }
        self.release(found).await;
    }
}

/// The bytes of the files in `messages` that a model reading `inputs` gets, newest
/// first until `budget` bytes; older ones (and any it cannot read) go as a line naming
/// them. A blob that cannot be read is left out the same way, with a warning.
pub(crate) async fn load_files(
    blobs: Option<&BlobDir>,
    messages: &[spool_protocol::Message],
    inputs: crate::model::Inputs,
    budget: u64,
) -> crate::model::FileBytes {
    let mut loaded = crate::model::FileBytes::new();
    let Some(blobs) = blobs else { return loaded };
    let mut used = 0u64;
    for message in messages.iter().rev() {
        for file in message.files() {
            let Content::File { sha256, size, media_type, .. } = file else { continue };
            if loaded.contains_key(sha256) || !inputs.reads(media_type) || used + size > budget {
                continue;
            }
            match blobs.read(sha256).await {
                Ok(bytes) => {
                    used += size;
                    loaded.insert(sha256.clone(), bytes);
                }
                Err(error) => tracing::warn!(%sha256, %error, "an attachment's blob cannot be read; sent as its name"),
            }
        }
    }
    loaded
}

fn info(a: &Attachment) -> AttachmentInfo {
    AttachmentInfo {
        id: a.id.clone(),
        name: a.name.clone(),
        media_type: a.media_type.clone(),
        size: a.size,
        sha256: a.sha256.clone(),
        url: format!("/api/attachments/{}", a.id),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn io_error(error: std::io::Error) -> EngineError {
    EngineError::Unavailable {
        code: "attachments_unavailable",
        message: format!("the attachment store failed: {error}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn media_types_come_from_the_bytes_not_the_claim() {
        assert_eq!(sniff(b"\x89PNG\r\n\x1a\n....", false, Some("text/plain")).as_deref(), Some("image/png"));
        assert_eq!(sniff(&[0xFF, 0xD8, 0xFF, 0xE0], false, None).as_deref(), Some("image/jpeg"));
        assert_eq!(sniff(b"GIF89a..", false, None).as_deref(), Some("image/gif"));
        assert_eq!(sniff(b"RIFF\0\0\0\0WEBPVP8 ", false, None).as_deref(), Some("image/webp"));
        assert_eq!(sniff(b"%PDF-1.7\n", false, Some("image/png")).as_deref(), Some("application/pdf"));
        // Active content is text, whatever it claims to be.
        assert_eq!(sniff(b"<svg onload=alert(1)>", true, Some("image/svg+xml")).as_deref(), Some("text/plain"));
        assert_eq!(sniff(b"<html>", true, Some("text/html")).as_deref(), Some("text/plain"));
        assert_eq!(sniff(b"# notes", true, Some("text/markdown; charset=utf-8")).as_deref(), Some("text/markdown"));
        assert_eq!(sniff(b"\x7fELF\x02", false, Some("text/plain")), None, "binary is refused");
    }

    #[test]
    fn names_are_a_last_segment_without_controls() {
        assert_eq!(sanitize_name("../../etc/passwd"), "passwd");
        assert_eq!(sanitize_name("C:\\Users\\me\\shot.png"), "shot.png");
        assert_eq!(sanitize_name("evil\u{202E}gnp.exe"), "evilgnp.exe");
        assert_eq!(sanitize_name("a\nb\tc"), "abc");
        assert_eq!(sanitize_name(" .. "), "file");
        assert_eq!(sanitize_name(&"é".repeat(200)).len(), 254, "cut on a character boundary");
    }
}
