//! `GET /api/health`: liveness plus what is serving (version, model).

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
}

/// Liveness, the server's version and its default model.
#[utoipa::path(get, path = "/api/health", tag = "meta", security(()), responses((status = 200, body = Health)))]
async fn health(State(state): State<AppState>) -> Json<Health> {
    Json(Health { status: "ok", version: env!("CARGO_PKG_VERSION"), model: state.engine.model_name() })
}
