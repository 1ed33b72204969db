//! `POST /api/markdown`: renders a batch of Markdown texts (a model's answers) to safe
//! HTML for the web UI, which has no bundler and fetches nothing from elsewhere, so the
//! Markdown library lives here (`crate::markdown`). Batched because the page asks for
//! every visible message at once; limited per batch and per text so one request cannot
//! hold a core for long, and rendered on the blocking pool for the same reason.

use super::responses::MarkdownErrors;
use crate::error::ApiError;
use crate::extract::{BodyCheck, CurrentUser, JsonBody, json_body};
use crate::state::AppState;
use axum::Json;
use serde::{Deserialize, Serialize};
use spool_engine::EngineError;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// The most texts one request renders.
pub const MAX_TEXTS: usize = 64;
/// The longest text rendered, in bytes of UTF-8.
pub const MAX_TEXT_BYTES: usize = 256 * 1024;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(render))
}

#[derive(Deserialize, ToSchema)]
struct MarkdownBody {
    /// Up to 64 Markdown texts, each at most 256 KiB.
    texts: Vec<String>,
}

#[derive(Serialize, ToSchema)]
struct Rendered {
    /// Each text's sanitized HTML, in the order of `texts`.
    html: Vec<String>,
}

impl MarkdownBody {
    /// The texts, if the batch is within the limits.
    fn checked(self) -> Result<Vec<String>, ApiError> {
        if self.texts.len() > MAX_TEXTS {
            return Err(ApiError::bad_request(
                "too_many_texts",
                format!("{} texts in one request; at most {MAX_TEXTS} are rendered at once", self.texts.len()),
            ));
        }
        if let Some(index) = self.texts.iter().position(|t| t.len() > MAX_TEXT_BYTES) {
            return Err(ApiError::Engine(EngineError::TooLarge {
                code: "text_too_large",
                message: format!("texts[{index}] is over {} KiB", MAX_TEXT_BYTES / 1024),
            }));
        }
        Ok(self.texts)
    }
}

/// Renders CommonMark with GFM tables, strikethrough and task lists as sanitized HTML:
/// raw HTML shows as text, links only to `http:`, `https:`, `mailto:` or relative
/// addresses, images as links, code blocks highlighted with `hl-…` classes.
#[utoipa::path(
    post,
    path = "/api/markdown",
    request_body = MarkdownBody,
    responses((status = 200, description = "The HTML of each text, in order", body = Rendered), MarkdownErrors)
)]
async fn render(
    CurrentUser(_): CurrentUser,
    JsonBody(body): JsonBody<MarkdownBody>,
) -> Result<Json<Rendered>, ApiError> {
    let texts = body.checked()?;
    let html = tokio::task::spawn_blocking(move || texts.iter().map(|t| crate::markdown::render(t)).collect())
        .await
        .map_err(|_| ApiError::Internal)?;
    Ok(Json(Rendered { html }))
}

/// Each body this module reads, parsed and checked as its handler does.
pub(super) const BODIES: &[(&str, BodyCheck)] =
    &[("POST /api/markdown", |b| json_body::<MarkdownBody>(b).and_then(MarkdownBody::checked).map(drop))];
