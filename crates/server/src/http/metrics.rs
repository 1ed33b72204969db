//! `GET /metrics`: Prometheus text format. Counts only — no ids, no user data — so it
//! is served without auth, like the health check, for a scraper on the same network.

use crate::state::AppState;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use spool_engine::metrics::METRICS;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(metrics))
}

/// Prometheus text exposition format 0.0.4.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "meta",
    security(()),
    responses((
        status = 200,
        description = "Counters, gauges and histograms in Prometheus text format",
        content_type = "text/plain; version=0.0.4; charset=utf-8",
        body = String
    ))
)]
async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    let body = METRICS.render(state.engine.lists().subscriber_count());
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], body)
}
