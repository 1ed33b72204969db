//! Placeholder for the chat wire dialect (issue 6); replaced by its implementation.

use crate::state::AppState;
use axum::Router;

pub fn router() -> Router<AppState> {
    Router::new()
}
