//! `GET /metrics`: the engine's metrics as OpenMetrics text (see
//! `spool_engine::metrics`). Counts and durations only — no ids, no user data — so it
//! is served without auth, like the health check, for a scraper on the same network.
//! With `--no-metrics` nothing is recorded and the route answers 404.

use crate::error::ApiError;
use crate::state::AppState;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// The OpenMetrics 1.0 text format's content type, which Prometheus asks for first.
pub(crate) const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(metrics))
}

/// OpenMetrics text exposition 1.0: counters, gauges and histograms, ending in `# EOF`.
#[utoipa::path(
    get,
    path = "/metrics",
    security(()),
    responses(
        (
            status = 200,
            description = "Counters, gauges and histograms in the OpenMetrics text format",
            content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8",
            body = String
        ),
        (status = 404, description = "Metrics are off (`spool serve --no-metrics`)", body = spool_protocol::api::ErrorBody),
    )
)]
async fn metrics(State(state): State<AppState>) -> Result<Response, ApiError> {
    if !state.engine.metrics().is_on() {
        return Err(ApiError::not_found("metrics"));
    }
    Ok(([(header::CONTENT_TYPE, OPENMETRICS)], state.engine.metrics_text()).into_response())
}
