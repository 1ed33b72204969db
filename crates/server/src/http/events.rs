//! `GET /api/sessions/:id/events`: the native session stream (seed 000).
//!
//! The engine's `Subscription` already yields complete SSE events as shared `Bytes`
//! (snapshot or replay first, then live frames), so this handler only picks the cursor,
//! merges in heartbeats and sets the headers. axum's `Sse` type is not used: it would
//! re-encode every frame per subscriber.

use super::openapi::SessionStreamEvent;
use super::openapi::StreamErrors;
use crate::error::ApiError;
use crate::extract::{Caller, PathId, QueryParams};
use crate::revocation::watched;
use crate::serve::ConnectionToken;
use crate::state::AppState;
use axum::body::Body;
use axum::extract::State;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::http::{HeaderMap, HeaderName};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::Stream;
use serde::Deserialize;
use spool_protocol::{Cursor, SessionId, sse};
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, Interval, MissedTickBehavior};
use utoipa::IntoParams;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

const LAST_EVENT_ID: HeaderName = HeaderName::from_static("last-event-id");
const X_ACCEL_BUFFERING: HeaderName = HeaderName::from_static("x-accel-buffering");

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
}

/// The native session stream: a `session.snapshot` or the replay after the cursor,
/// then live frames (`session.state`, `run.accepted`, `loop.event`), each with SSE id
/// `streamId:seq`, and a `heartbeat` event in silences. It does not end on its own.
#[utoipa::path(
    get,
    path = "/api/sessions/{id}/events",
    tag = "streams",
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
    Caller { user, credential }: Caller,
    PathId(id): PathId<SessionId>,
    ConnectionToken(connection): ConnectionToken,
    headers: HeaderMap,
    QueryParams(query): QueryParams<EventsQuery>,
) -> Result<Response, ApiError> {
    // The header wins when present; a cursor that does not parse means a snapshot.
    let header = headers.get(LAST_EVENT_ID).and_then(|v| v.to_str().ok()).filter(|v| !v.trim().is_empty());
    let cursor = header.or(query.cursor.as_deref()).and_then(Cursor::parse);
    // The connection's own token, not a child: when the engine cuts this subscriber the
    // accept loop must see it to drop a connection whose client stopped reading.
    let interactive = matches!(query.approvals.as_deref(), Some("1" | "true"));
    let watch = state.engine.watch_credential(&credential, connection.clone());
    let (subscription, start) = state.engine.subscribe(&user, &id, cursor.as_ref(), connection, interactive).await?;
    tracing::debug!(session = %id, ?start, "stream subscribed");
    Ok(watched(sse_response(subscription, state.config.heartbeat), watch))
}

/// An SSE response over a stream of pre-encoded frames, with the stream headers of
/// seed 000 and a heartbeat; shared by the session and list streams.
pub(crate) fn sse_response<S>(frames: S, heartbeat: Duration) -> Response
where
    S: Stream<Item = Bytes> + Send + Unpin + 'static,
{
    let body = Body::from_stream(EventBody::new(frames, heartbeat));
    let headers =
        [(CONTENT_TYPE, "text/event-stream"), (CACHE_CONTROL, "no-cache, no-transform"), (X_ACCEL_BUFFERING, "no")];
    (headers, body).into_response()
}

/// `stream`, holding `permit` (one of the user's counted streams) until it is dropped:
/// when the connection goes, the body goes, and the count with it.
pub(crate) fn holding<S: Stream>(stream: S, permit: spool_engine::StreamPermit) -> impl Stream<Item = S::Item> {
    use futures::StreamExt;
    stream.map(move |item| {
        let _held = &permit;
        item
    })
}

/// The subscription's frames with a heartbeat whenever the interval elapses. Ends when
/// the subscription ends (the subscriber was cut or the session closed).
struct EventBody<S> {
    subscription: S,
    heartbeat: Interval,
}

impl<S> EventBody<S> {
    fn new(subscription: S, every: Duration) -> Self {
        let mut heartbeat = tokio::time::interval_at(Instant::now() + every, every);
        // After a stall, one heartbeat is enough; no burst to catch up.
        heartbeat.set_missed_tick_behavior(MissedTickBehavior::Delay);
        Self { subscription, heartbeat }
    }
}

impl<S: Stream<Item = Bytes> + Unpin> Stream for EventBody<S> {
    type Item = Result<Bytes, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        match Pin::new(&mut self.subscription).poll_next(cx) {
            Poll::Ready(Some(frames)) => return Poll::Ready(Some(Ok(frames))),
            Poll::Ready(None) => return Poll::Ready(None),
            Poll::Pending => {}
        }
        match self.heartbeat.poll_tick(cx) {
            Poll::Ready(_) => Poll::Ready(Some(Ok(Bytes::from_static(sse::HEARTBEAT)))),
            Poll::Pending => Poll::Pending,
        }
    }
}
