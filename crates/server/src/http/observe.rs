//! The metrics layer: every request is counted and timed by its route *pattern* (axum's
//! `MatchedPath`, e.g. `/api/sessions/{id}/events`; `unmatched` when no route took it),
//! never by its raw path, so a scraper sees one series per route rather than one per
//! session id. Its duration runs to the response head: for a stream that is the time
//! to start streaming, not how long it stayed open.
//!
//! An event-stream response of a streaming route is also counted in
//! `spool_open_streams{dialect}` for as long as its body lives (hyper drops the body
//! when the client goes away). The two WebSocket routes count their sockets themselves,
//! in their upgrade handlers: the 101 response's body ends at once, the socket lives on.

use axum::body::Body;
use axum::extract::{MatchedPath, Request, State};
use axum::http::header::CONTENT_TYPE;
use axum::middleware::Next;
use axum::response::Response;
use http_body_util::BodyExt;
use spool_engine::metrics::{Dialect, Metrics};
use std::time::Instant;

/// The route label of a request no route matched.
const UNMATCHED: &str = "unmatched";

pub(super) async fn record(State(metrics): State<Metrics>, request: Request, next: Next) -> Response {
    if !metrics.is_on() {
        return next.run(request).await;
    }
    let route = request.extensions().get::<MatchedPath>().map(|p| p.as_str().to_owned());
    let method = request.method().clone();
    let started = Instant::now();
    let response = next.run(request).await;
    let route = route.as_deref().unwrap_or(UNMATCHED);
    metrics.http_request(route, method.as_str(), response.status().as_u16(), started.elapsed());
    match streaming_dialect(route) {
        Some(dialect) if is_event_stream(&response) => {
            let held = metrics.stream_opened(dialect);
            response.map(|body| {
                Body::new(body.map_frame(move |frame| {
                    // Owned by the body: dropped, and the gauge lowered, with it.
                    let _held = &held;
                    frame
                }))
            })
        }
        _ => response,
    }
}

/// The dialect of a route that answers with an event stream.
fn streaming_dialect(route: &str) -> Option<Dialect> {
    Some(match route {
        "/api/sessions/{id}/events" => Dialect::Native,
        "/api/workspaces/events" => Dialect::Lists,
        "/api/chat" | "/api/runs/{id}/events" | "/api/runs/{id}/resume" => Dialect::RunStream,
        "/api/ai-sdk/chat" | "/api/ai-sdk/chat/{id}/stream" => Dialect::AiSdk,
        "/event" => Dialect::OpenCode,
        "/api/ag-ui" => Dialect::AgUi,
        "/api/hub/events" => Dialect::Hub,
        _ => return None,
    })
}

fn is_event_stream(response: &Response) -> bool {
    response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_streaming_route_has_a_dialect_and_others_none() {
        assert_eq!(streaming_dialect("/api/sessions/{id}/events"), Some(Dialect::Native));
        assert_eq!(streaming_dialect("/event"), Some(Dialect::OpenCode));
        assert_eq!(streaming_dialect("/api/ag-ui"), Some(Dialect::AgUi));
        assert_eq!(streaming_dialect("/api/sessions/{id}"), None);
        assert_eq!(streaming_dialect(UNMATCHED), None);
    }
}
