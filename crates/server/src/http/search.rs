//! `GET /api/sessions/search` (the sidebar's search box: the caller's sessions whose
//! title or messages contain a string, paged) and `GET /api/sessions/:id/runs` (every
//! run of a session with its usage and cost, for the per-answer and per-session
//! totals). Limits and the cursor are the engine's (`spool_engine::search`); a search
//! refused by the per-user or per-node search limit is a 429 with `Retry-After`.

use super::responses::ReadErrors;
use crate::error::ApiError;
use crate::extract::{Acting, PathId, QueryParams};
use crate::state::AppState;
use axum::Json;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use spool_engine::{EngineError, SearchPage};
use spool_protocol::{Run, SessionId};
use utoipa::IntoParams;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(search)).routes(routes!(runs))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct SearchQuery {
    /// What to look for in titles and message text, case-insensitively: 1 to 200 characters.
    #[param(max_length = 200)]
    q: String,
    /// Sessions per page: 1 to 100 (default 20).
    #[param(minimum = 1, maximum = 100)]
    limit: Option<u32>,
    /// The `nextCursor` of the previous page.
    cursor: Option<String>,
}

/// The caller's sessions (archived ones too) whose title or message text contains `q`,
/// newest activity first, each with a snippet of the match.
#[utoipa::path(
    get,
    path = "/api/sessions/search",
    tag = "sessions",
    params(SearchQuery),
    responses((status = 200, body = SearchPage), ReadErrors)
)]
async fn search(Acting { engine, user }: Acting, QueryParams(query): QueryParams<SearchQuery>) -> Response {
    match engine.sessions().search(&user, &query.q, query.limit, query.cursor.as_deref()).await {
        Ok(page) => Json(page).into_response(),
        // Past the search limits (see `spool_engine::search_slots`): a slot frees as
        // soon as a search ends, so "a second" is an honest hint.
        Err(e @ EngineError::TooMany { .. }) => {
            ([(header::RETRY_AFTER, HeaderValue::from_static("1"))], ApiError::from(e)).into_response()
        }
        Err(e) => ApiError::from(e).into_response(),
    }
}

/// The session's runs, oldest first, each with its status, timings, usage and cost.
#[utoipa::path(
    get,
    path = "/api/sessions/{id}/runs",
    tag = "runs",
    params(("id" = SessionId, Path)),
    responses((status = 200, body = Vec<Run>), ReadErrors)
)]
async fn runs(Acting { engine, user }: Acting, PathId(id): PathId<SessionId>) -> Result<Json<Vec<Run>>, ApiError> {
    Ok(Json(engine.runs().of_session(&user, &id).await?))
}
