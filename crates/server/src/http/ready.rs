//! `GET /api/ready`: readiness, for a load balancer in front of several nodes. 200 when
//! the store, the Redis bus (with `--redis-url`) and the lease loop all work; 503 with
//! the failing checks' reasons when one does not. Unauthenticated like `/api/health`,
//! which stays the liveness probe (a node that is not ready is taken out of rotation,
//! not restarted). The checks are the engine's (`spool_engine::readiness`), each
//! bounded, so this answers within about a second whatever hangs.

use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Serialize;
use spool_engine::Readiness;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(ready))
}

#[derive(Serialize, ToSchema)]
struct Ready {
    /// `ready`, or `not_ready` (then the status is 503).
    #[schema(pattern = "^(ready|not_ready)$")]
    status: &'static str,
    /// The first failing check and its reason (`bus: …`); absent when ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    /// Each check and its state: `store`, `bus` (only with `--redis-url`), `leases`.
    checks: Readiness,
}

/// Readiness: whether the store, the Redis bus (when configured) and the lease loop
/// work, with the reason when one does not.
#[utoipa::path(
    get,
    path = "/api/ready",
    security(()),
    responses(
        (status = 200, description = "Every check passes", body = Ready),
        (status = 503, description = "A check fails; `reason` names it", body = Ready),
    )
)]
async fn ready(State(state): State<AppState>) -> (StatusCode, Json<Ready>) {
    let checks = state.engine.readiness().await;
    let reason = checks.failing().next().map(|(name, why)| format!("{name}: {why}"));
    let (code, status) = match reason {
        None => (StatusCode::OK, "ready"),
        Some(_) => (StatusCode::SERVICE_UNAVAILABLE, "not_ready"),
    };
    (code, Json(Ready { status, reason, checks }))
}
