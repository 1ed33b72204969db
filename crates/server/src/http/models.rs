//! `GET /api/models`: the configured models and which one is the default. With no
//! provider configured the list is the scripted model alone and `configured` is false,
//! so a client can say that answers are scripted.

use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use serde::Serialize;
use spool_engine::ModelInfo;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list))
}

#[derive(Serialize, ToSchema)]
struct ModelList {
    /// The name of the default model.
    default: String,
    /// False when only the offline scripted model is available.
    configured: bool,
    models: Vec<ModelInfo>,
}

/// The configured models.
#[utoipa::path(get, path = "/api/models", security(()), responses((status = 200, body = ModelList)))]
async fn list(State(state): State<AppState>) -> Json<ModelList> {
    let models = state.engine.models();
    let configured = models.iter().any(|m| m.name != "scripted");
    Json(ModelList { default: state.engine.model_name(), configured, models })
}
