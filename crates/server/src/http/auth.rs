//! Browser login: `POST /api/login {token}` checks a token and sets it as an HttpOnly,
//! `SameSite=Strict` cookie (`Secure` behind TLS), which EventSource and WebSocket
//! connections then carry; `POST /api/logout` clears it; `GET /api/auth` tells a page
//! whether it must ask for a token and who it is.

use crate::error::ApiError;
use crate::extract::{AUTH_COOKIE, JsonBody, cookie, same_origin};
use crate::state::AppState;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use spool_protocol::UserId;

pub fn router() -> Router<AppState> {
    Router::new().route("/api/auth", get(status)).route("/api/login", post(login)).route("/api/logout", post(logout))
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct AuthStatus {
    required: bool,
    /// The user this request authenticates as, if any.
    user: Option<UserId>,
}

async fn status(State(state): State<AppState>, headers: HeaderMap) -> Result<Json<AuthStatus>, ApiError> {
    let required = state.engine.auth_required().await?;
    let user = if !required {
        Some(state.engine.local_user().clone())
    } else {
        let bearer =
            headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "));
        match bearer.map(str::to_owned).or_else(|| cookie(&headers, AUTH_COOKIE)) {
            Some(secret) => state.engine.authenticate(&secret).await?,
            None => None,
        }
    };
    Ok(Json(AuthStatus { required, user }))
}

#[derive(Deserialize)]
struct LoginBody {
    token: String,
}

async fn login(
    State(state): State<AppState>,
    headers: HeaderMap,
    JsonBody(body): JsonBody<LoginBody>,
) -> Result<Response, ApiError> {
    // A login form posted from another site must not plant a cookie here.
    if headers.contains_key(header::ORIGIN) && !same_origin(&headers) {
        return Err(ApiError::Forbidden { code: "bad_origin", message: "log in from this server's own pages".into() });
    }
    let Some(user) = state.engine.authenticate(body.token.trim()).await? else {
        return Err(ApiError::Unauthorized {
            code: "invalid_token",
            message: "the token is unknown or revoked".into(),
        });
    };
    let secure =
        state.config.secure_cookies || headers.get("x-forwarded-proto").and_then(|v| v.to_str().ok()) == Some("https");
    let cookie = format!(
        "{AUTH_COOKIE}={}; HttpOnly; SameSite=Strict; Path=/{}",
        body.token.trim(),
        if secure { "; Secure" } else { "" }
    );
    let mut response = Json(AuthStatus { required: true, user: Some(user) }).into_response();
    let value = HeaderValue::from_str(&cookie)
        .map_err(|_| ApiError::bad_request("invalid_token", "the token has invalid characters"))?;
    response.headers_mut().insert(header::SET_COOKIE, value);
    Ok(response)
}

async fn logout() -> Response {
    let mut response = Json(serde_json::json!({"loggedOut": true})).into_response();
    let clear = format!("{AUTH_COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0");
    response.headers_mut().insert(header::SET_COOKIE, HeaderValue::from_str(&clear).expect("ASCII cookie"));
    response
}
