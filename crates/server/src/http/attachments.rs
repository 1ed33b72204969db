//! Attachments (issue 42): `POST /api/uploads` stores a file for a later prompt,
//! `DELETE /api/uploads/{id}` takes one back before any prompt used it,
//! `GET /api/attachments/{id}` gives its owner the bytes back, and a prompt's `parts`
//! name uploads by id or carry files inline as data URLs ([`prompt_files`]).
//!
//! An upload's body is the file's raw bytes (`Content-Type: application/octet-stream`,
//! which `crate::guard` admits on this route only), streamed to disk by the engine, so
//! a large file is never held whole in memory. The bytes served back are never active
//! content: text of any kind (SVG and HTML included) is `text/plain`, every answer is
//! `nosniff` and sandboxed, and only raster images and PDFs are shown inline.

use super::responses::{ReadErrors, WriteErrors};
use crate::error::ApiError;
use crate::extract::{Acting, PathId};
use crate::state::AppState;
use axum::Json;
use axum::body::Body;
use axum::extract::Query;
use axum::http::header::{
    CACHE_CONTROL, CONTENT_DISPOSITION, CONTENT_LENGTH, CONTENT_SECURITY_POLICY, CONTENT_TYPE, ETAG,
    X_CONTENT_TYPE_OPTIONS,
};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use spool_engine::Engine;
use spool_protocol::api::{AttachmentInfo, PromptPart};
use spool_protocol::{AttachmentId, UserId};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(upload)).routes(routes!(remove)).routes(routes!(download))
}

#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct UploadQuery {
    /// The file's name (sanitized: its last path segment, no control characters).
    #[serde(default)]
    name: Option<String>,
}

/// Stores a file for a prompt to send by `id` (`parts: [{type: "file", id}]`). What it
/// is comes from its bytes: PNG, JPEG, GIF, WebP, PDF or UTF-8 text, else 400
/// `unsupported_file_type`. Over `[limits] upload_bytes` it is 413 `file_too_large`
/// (a `Content-Length` over it before a byte is read), over the user's
/// `attachment_bytes_per_user` 429 `attachment_quota`; a refused upload leaves nothing.
#[utoipa::path(
    post,
    path = "/api/uploads",
    params(UploadQuery),
    request_body(content = Vec<u8>, content_type = "application/octet-stream", description = "The file's bytes"),
    responses((status = 201, description = "Stored, owned by the caller", body = AttachmentInfo), WriteErrors)
)]
async fn upload(
    Acting { engine, user }: Acting,
    Query(query): Query<UploadQuery>,
    headers: HeaderMap,
    body: Body,
) -> Result<(StatusCode, Json<AttachmentInfo>), ApiError> {
    let limit = engine.attachments().limits().upload_bytes;
    let length = headers.get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if length.is_some_and(|n| n > limit) {
        return Err(spool_engine::EngineError::TooLarge {
            code: "file_too_large",
            message: format!("the file is over the limit of {limit} bytes"),
        }
        .into());
    }
    let name = query.name.unwrap_or_default();
    let stored = engine.attachments().upload(&user, &name, None, body.into_data_stream()).await?;
    Ok((StatusCode::CREATED, Json(stored)))
}

/// Removes one of the caller's uploads that no prompt has sent yet (the web composer's
/// ✕), and its bytes when nothing else holds them. An upload a prompt sent is 409
/// `attachment_in_use`: it stays with its session and goes when the session is deleted.
/// Uploads never sent are also removed on their own after `[limits] upload_ttl_hours`.
#[utoipa::path(
    delete,
    path = "/api/uploads/{id}",
    params(("id" = String, Path, description = "An `att_…` id")),
    responses(
        (status = 204, description = "Removed"),
        (status = 401, description = "No valid token or login session on a server that requires one (`unauthorized`, `invalid_token`)", body = spool_protocol::api::ErrorBody),
        (status = 403, description = "The browser guard: a foreign `Origin` or `Sec-Fetch-Site`, or a `Host` this server does not serve (`bad_origin`, `bad_host`)", body = spool_protocol::api::ErrorBody),
        (status = 404, description = "No such upload, or another user's (`not_found`)", body = spool_protocol::api::ErrorBody),
        (status = 409, description = "A prompt sent it: it goes with its session (`attachment_in_use`)", body = spool_protocol::api::ErrorBody),
    )
)]
async fn remove(Acting { engine, user }: Acting, PathId(id): PathId<AttachmentId>) -> Result<StatusCode, ApiError> {
    engine.attachments().delete_upload(&user, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// One of the caller's attachments, its bytes as stored. Another user's, or an unknown
/// id, is 404 `not_found`.
#[utoipa::path(
    get,
    path = "/api/attachments/{id}",
    params(("id" = String, Path, description = "An `att_…` id")),
    responses(
        (status = 200, description = "The file's bytes: raster images and PDFs as their type, anything else as plain text (so a browser never runs it) to download", content(
            (Vec<u8> = "image/png"),
            (Vec<u8> = "image/jpeg"),
            (Vec<u8> = "image/gif"),
            (Vec<u8> = "image/webp"),
            (Vec<u8> = "application/pdf"),
            (String = "text/plain; charset=utf-8"),
        )),
        ReadErrors
    )
)]
async fn download(Acting { engine, user }: Acting, PathId(id): PathId<AttachmentId>) -> Result<Response, ApiError> {
    let (file, path) = engine.attachments().open(&user, &id).await?;
    let opened = tokio::fs::File::open(&path).await.map_err(|_| spool_engine::EngineError::Unavailable {
        code: "attachment_unavailable",
        message: "this attachment's bytes are not on this node".into(),
    })?;
    let raster = matches!(file.media_type.as_str(), "image/png" | "image/jpeg" | "image/gif" | "image/webp");
    let content_type = if raster || file.media_type == "application/pdf" {
        file.media_type.clone()
    } else {
        // Text of any kind, so a browser never runs it.
        "text/plain; charset=utf-8".to_owned()
    };
    let disposition = if raster {
        "inline".to_owned()
    } else {
        format!("attachment; filename*=UTF-8''{}", percent_encoded(&file.name))
    };
    let header = |v: &str| HeaderValue::from_str(v).unwrap_or(HeaderValue::from_static("application/octet-stream"));
    let body = Body::from_stream(tokio_util::io::ReaderStream::new(opened));
    let headers = [
        (CONTENT_TYPE, header(&content_type)),
        (CONTENT_LENGTH, HeaderValue::from(file.size)),
        (CONTENT_DISPOSITION, header(&disposition)),
        (X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff")),
        (CONTENT_SECURITY_POLICY, HeaderValue::from_static("sandbox; default-src 'none'")),
        (CACHE_CONTROL, HeaderValue::from_static("private, max-age=31536000, immutable")),
        (ETAG, header(&format!("\"{}\"", file.sha256))),
    ];
    Ok((headers, body).into_response())
}

/// RFC 5987's encoding of a name for `filename*`: unreserved characters as they are,
/// every other byte as `%XX`.
fn percent_encoded(name: &str) -> String {
    name.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Most bytes of a JSON body on a route that takes files inline (a prompt): room for
/// the base64 of `[limits] prompt_file_bytes` and the text around it.
pub(crate) const INLINE_BODY_BYTES: usize = 40 << 20;

/// A prompt's `parts` read: their text joined to `text`, their files as attachment ids
/// of `user` (an inline file stored first). Spool fetches no URL: only a `data:` URL or
/// one of its own `/api/attachments/att_…` is taken.
pub(crate) async fn prompt_files(
    engine: &Engine,
    user: &UserId,
    mut text: String,
    parts: Vec<PromptPart>,
) -> Result<(String, Vec<AttachmentId>), ApiError> {
    let mut files = Vec::new();
    for part in parts {
        match part {
            PromptPart::Text { text: more } => {
                if !text.is_empty() && !more.is_empty() {
                    text.push('\n');
                }
                text.push_str(&more);
            }
            PromptPart::File { id: Some(id), .. } => {
                files.push(id.parse().map_err(|_| ApiError::not_found("attachment"))?);
            }
            PromptPart::File { url: Some(url), name, media_type, .. } => {
                if let Some(id) = own_attachment(&url) {
                    files.push(id);
                    continue;
                }
                let Some((declared, bytes)) = data_url(&url, engine.attachments().limits().inline_file_bytes)? else {
                    return Err(ApiError::bad_request(
                        "unsupported_file_url",
                        "Spool fetches no URLs: upload the file (POST /api/uploads), or send it inline as a data URL",
                    ));
                };
                let declared = media_type.or(declared);
                let name = name.unwrap_or_default();
                let stored = engine.attachments().put(user, &name, declared.as_deref(), bytes).await?;
                files.push(stored.id);
            }
            PromptPart::File { .. } => {
                return Err(ApiError::bad_request("invalid_part", "a file part needs an `id` or a `url`"));
            }
        }
    }
    Ok((text, files))
}

/// The id in a URL of Spool's own attachments (`/api/attachments/att_…`, with or
/// without a scheme and host): clients that resend history send those back.
fn own_attachment(url: &str) -> Option<AttachmentId> {
    let (_, id) = url.rsplit_once("/api/attachments/")?;
    id.parse().ok()
}

/// A base64 `data:` URL's declared type and bytes; `None` for any other URL. A body
/// over `limit` decoded bytes is refused before it is decoded.
fn data_url(url: &str, limit: u64) -> Result<Option<(Option<String>, bytes::Bytes)>, ApiError> {
    let Some(rest) = url.strip_prefix("data:") else { return Ok(None) };
    let Some((meta, data)) = rest.split_once(',') else {
        return Err(ApiError::bad_request("invalid_data_url", "a data URL has a comma before its data"));
    };
    let Some(media_type) = meta.strip_suffix(";base64") else {
        return Err(ApiError::bad_request("invalid_data_url", "an inline file must be base64 (`data:TYPE;base64,…`)"));
    };
    if (data.len() as u64 / 4) * 3 > limit + 3 {
        return Err(spool_engine::EngineError::TooLarge {
            code: "inline_file_too_large",
            message: format!("an inline file may have {limit} bytes; send a larger one with POST /api/uploads"),
        }
        .into());
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .map_err(|_| ApiError::bad_request("invalid_data_url", "the data URL's data is not valid base64"))?;
    let declared = Some(media_type.to_owned()).filter(|t| !t.is_empty());
    Ok(Some((declared, bytes.into())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_of_spools_own_attachments_name_them_and_others_do_not() {
        let id = AttachmentId::new();
        assert_eq!(own_attachment(&format!("/api/attachments/{id}")), Some(id.clone()));
        assert_eq!(own_attachment(&format!("https://spool.example/api/attachments/{id}")), Some(id));
        assert_eq!(own_attachment("https://example.com/cat.png"), None);
    }

    #[test]
    fn data_urls_are_decoded_within_their_limit() {
        let (declared, bytes) = data_url("data:text/plain;base64,aGVsbG8=", 10).expect("valid").expect("a data URL");
        assert_eq!((declared.as_deref(), &bytes[..]), (Some("text/plain"), &b"hello"[..]));
        assert!(data_url("https://example.com/a.png", 10).expect("no error").is_none());
        assert!(data_url("data:text/plain,hello", 10).is_err(), "not base64");
        assert!(data_url(&format!("data:;base64,{}", "A".repeat(100)), 10).is_err(), "over the limit");
        assert_eq!(percent_encoded("a b/é.txt"), "a%20b%2F%C3%A9.txt");
    }
}
