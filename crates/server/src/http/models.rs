//! `GET /api/models`: the configured models and which one is the default. With no
//! provider configured the list is the scripted model alone and `configured` is false,
//! so a client can say that answers are scripted.

use crate::state::AppState;
use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;
use spool_engine::ModelInfo;

pub fn router() -> Router<AppState> {
    Router::new().route("/api/models", get(list))
}

#[derive(Serialize)]
struct ModelList {
    default: String,
    /// False when only the offline scripted model is available.
    configured: bool,
    models: Vec<ModelInfo>,
}

async fn list(State(state): State<AppState>) -> Json<ModelList> {
    let models = state.engine.models();
    let configured = models.iter().any(|m| m.name != "scripted");
    Json(ModelList { default: state.engine.model_name(), configured, models })
}
