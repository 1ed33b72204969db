//! `GET /metrics`: Prometheus text format. Counts only — no ids, no user data — so it
//! is served without auth, like the health check, for a scraper on the same network.

use crate::state::AppState;
use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use spool_engine::metrics::METRICS;

pub fn router() -> Router<AppState> {
    Router::new().route("/metrics", get(metrics))
}

async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    let body = METRICS.render(state.engine.lists().subscriber_count());
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], body)
}
