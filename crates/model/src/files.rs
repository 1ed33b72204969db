//! A user message's files as providers take them (issue 42): the shared part of the
//! Anthropic and OpenAI-compatible mappings. Images and PDFs go as the provider's own
//! blocks (see each adapter); a text file goes as text with its name; a file whose
//! bytes are not in the request (over the request's budget, or one the model cannot
//! read) goes as a line naming it, so the model knows it was there.

use base64::Engine as _;
use spool_engine::FileBytes;
use spool_engine::model::{file_stub, text_file_block};

/// One file of a message, with its bytes when the request carries them.
pub(crate) enum FilePart<'a> {
    /// An image, `data` in base64.
    Image { media_type: &'a str, data: String },
    /// A PDF, `data` in base64.
    Pdf { name: &'a str, data: String },
    /// Text for the model: a text file's content with its name, or a file's stub.
    Text(String),
}

/// What `media_type` with `sha256`'s bytes from `files` becomes.
pub(crate) fn file_part<'a>(
    name: &'a str,
    media_type: &'a str,
    size: u64,
    sha256: &str,
    files: &FileBytes,
) -> FilePart<'a> {
    let Some(bytes) = files.get(sha256) else { return FilePart::Text(file_stub(name, media_type, size)) };
    if media_type.starts_with("image/") {
        FilePart::Image { media_type, data: base64(bytes) }
    } else if media_type == "application/pdf" {
        FilePart::Pdf { name, data: base64(bytes) }
    } else {
        FilePart::Text(text_file_block(name, media_type, bytes))
    }
}

fn base64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}
