//! `GET /api/sessions/:id/events`: the native session stream (seed 000).
//!
//! The engine's `Subscription` already yields complete SSE events as shared `Bytes`
//! (snapshot or replay first, then live frames), so this handler only picks the cursor;
//! a cursor whose frames left the buffer replays from the run frame log where that is
//! exact (`events::from_log` in the engine). The headers and heartbeats are `sse.rs`'s.

use super::responses::StreamErrors;
use super::sse;
use super::stream_events::SessionStreamEvent;
use crate::error::ApiError;
use crate::extract::{PathId, QueryParams};
use crate::revocation::{StreamCaller, watched};
use crate::state::AppState;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use bytes::Bytes;
use futures::Stream;
use serde::Deserialize;
use spool_engine::Viewer;
use spool_protocol::{ClientKind, Cursor, SessionId};
use std::time::Duration;
use utoipa::IntoParams;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(stream))
}

/// `?cursor=` resumes like `Last-Event-ID`. `?approvals=1` registers the connection as
/// an interactive view: a place where a person can answer approvals (seed 000/001).
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct EventsQuery {
    /// `streamId:seq` of the last frame the client has (the `Last-Event-ID` header wins).
    cursor: Option<String>,
    /// `1` or `true`: this connection is a place where a person answers approvals.
    approvals: Option<String>,
    /// The kind of client, for presence: `web`, `cli`, `hub`, `ag-ui`, `ai-sdk`,
    /// `opencode` (anything else, or none, counts as `other`).
    client: Option<String>,
}

/// The native session stream: a `session.snapshot` or the replay after the cursor,
/// then live frames (`session.state`, `run.accepted`, `loop.event`), each with SSE id
/// `streamId:seq`, and a `heartbeat` event in silences. It does not end on its own.
#[utoipa::path(
    get,
    path = "/api/sessions/{id}/events",
    params(
        ("id" = SessionId, Path),
        ("Last-Event-ID" = Option<String>, Header, description = "`streamId:seq` to resume after"),
        EventsQuery,
    ),
    responses(
        (status = 200, description = "Server-sent events", content_type = "text/event-stream", body = SessionStreamEvent),
        StreamErrors,
    )
)]
async fn stream(
    State(state): State<AppState>,
    StreamCaller { user, connection, watch }: StreamCaller,
    PathId(id): PathId<SessionId>,
    headers: HeaderMap,
    QueryParams(query): QueryParams<EventsQuery>,
) -> Result<Response, ApiError> {
    // The header wins when present; a cursor that does not parse means a snapshot.
    let cursor = sse::last_event_id(&headers).or(query.cursor.as_deref()).and_then(Cursor::parse);
    // The connection's own token, not a child: when the engine cuts this subscriber the
    // accept loop must see it to drop a connection whose client stopped reading.
    let kind = query.client.as_deref().and_then(ClientKind::parse).unwrap_or(ClientKind::Other);
    let viewer = match matches!(query.approvals.as_deref(), Some("1" | "true")) {
        true => Viewer::answering(kind),
        false => Viewer::watching(kind),
    };
    let (subscription, start) =
        state.engine.sessions().subscribe_logged(&user, &id, cursor.as_ref(), connection, viewer).await?;
    tracing::debug!(session = %id, ?start, "stream subscribed");
    Ok(watched(sse_response(subscription, state.config.heartbeat), watch))
}

/// The SSE response of a session or list stream: pre-encoded frames with the native
/// `heartbeat` event in silences.
pub(crate) fn sse_response<S>(frames: S, heartbeat: Duration) -> Response
where
    S: Stream<Item = Bytes> + Send + Unpin + 'static,
{
    let body = sse::WithHeartbeat::new(frames, heartbeat, Bytes::from_static(spool_protocol::sse::HEARTBEAT));
    sse::response(sse::EVENT_STREAM, body)
}
