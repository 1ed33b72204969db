//! `GET /api/health`: liveness plus what is serving (version, model) and how commands
//! are confined, so an operator sees at once when Landlock is missing.

use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(health))
}

#[derive(Serialize, ToSchema)]
struct Health {
    /// Always `ok`.
    #[schema(pattern = "^ok$")]
    status: &'static str,
    version: &'static str,
    /// The default model's name.
    model: String,
    /// How `bash` commands are confined (`landlock: false` where the kernel lacks it).
    /// Absent when the server was started without a sandbox report.
    #[serde(skip_serializing_if = "Option::is_none")]
    sandbox: Option<spool_engine::SandboxStatus>,
}

/// Liveness, the server's version and its default model.
#[utoipa::path(get, path = "/api/health", security(()), responses((status = 200, body = Health)))]
async fn health(State(state): State<AppState>) -> Json<Health> {
    Json(Health {
        status: "ok",
        version: env!("CARGO_PKG_VERSION"),
        model: state.engine.model_name(),
        sandbox: state.config.sandbox.clone(),
    })
}
