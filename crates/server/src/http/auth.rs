//! Browser login: `POST /api/login {token}` checks a token and sets it as an HttpOnly,
//! `SameSite=Strict` cookie (`Secure` behind TLS), which EventSource and WebSocket
//! connections then carry; `POST /api/logout` clears it; `GET /api/auth` tells a page
//! whether it must ask for a token and who it is.

use super::openapi::WriteErrors;
use crate::error::ApiError;
use crate::extract::{AUTH_COOKIE, JsonBody, cookie, json_body, same_origin};
use crate::fuzzing::BodyCheck;
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use spool_protocol::UserId;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(status)).routes(routes!(login)).routes(routes!(logout))
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct AuthStatus {
    /// Whether this server asks for a token.
    required: bool,
    /// The user this request authenticates as, if any.
    user: Option<UserId>,
}

/// Whether the server requires a token, and who this request is.
#[utoipa::path(
    get,
    path = "/api/auth",
    tag = "auth",
    security(()),
    responses((status = 200, body = AuthStatus))
)]
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

#[derive(Deserialize, ToSchema)]
struct LoginBody {
    token: String,
}

/// Checks a token and sets it as the HttpOnly login cookie.
#[utoipa::path(
    post,
    path = "/api/login",
    tag = "auth",
    security(()),
    request_body = LoginBody,
    responses(
        (
            status = 200,
            description = "The token is valid; `Set-Cookie` carries it",
            body = AuthStatus,
            headers(("Set-Cookie" = String, description = "`spool_token=…; HttpOnly; SameSite=Strict; Path=/`"))
        ),
        WriteErrors,
    )
)]
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

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct LoggedOut {
    /// Always true.
    logged_out: bool,
}

/// Clears the login cookie.
#[utoipa::path(
    post,
    path = "/api/logout",
    tag = "auth",
    security(()),
    responses((
        status = 200,
        description = "The cookie is cleared",
        body = LoggedOut,
        headers(("Set-Cookie" = String, description = "`spool_token=; …; Max-Age=0`"))
    ))
)]
async fn logout() -> Response {
    let mut response = Json(LoggedOut { logged_out: true }).into_response();
    let clear = format!("{AUTH_COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0");
    response.headers_mut().insert(header::SET_COOKIE, HeaderValue::from_str(&clear).expect("ASCII cookie"));
    response
}

/// The body this module reads, parsed as its handler does.
pub(super) const BODIES: &[(&str, BodyCheck)] = &[("POST /api/login", |b| json_body::<LoginBody>(b).map(drop))];
