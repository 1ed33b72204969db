//! Browser login: `POST /api/login {token}` checks a token and starts a login session
//! whose random secret goes into an HttpOnly, `SameSite=Strict` cookie (`Secure` behind
//! TLS), which EventSource and WebSocket connections then carry. The cookie is never the
//! token: a stolen cookie dies with its login session, which `POST /api/logout` ends
//! server-side (and with it its open streams), as do revoking the token and expiry.
//! `GET /api/auth` tells a page whether it must ask for a token and who it is.

use super::responses::WriteErrors;
use crate::error::ApiError;
use crate::extract::{AUTH_COOKIE, BodyCheck, JsonBody, Presented, cookie, json_body, presented, same_origin};
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
#[utoipa::path(get, path = "/api/auth", security(()), responses((status = 200, body = AuthStatus)))]
async fn status(State(state): State<AppState>, headers: HeaderMap) -> Result<Json<AuthStatus>, ApiError> {
    let required = state.engine.auth().auth_required().await?;
    let user = if !required {
        Some(state.engine.local_user().clone())
    } else if let Presented::Known { user, .. } = presented(&state, &headers).await? {
        Some(user)
    } else {
        None
    };
    Ok(Json(AuthStatus { required, user }))
}

#[derive(Deserialize, ToSchema)]
struct LoginBody {
    token: String,
}

/// Checks a token and starts a login session: its secret (not the token) becomes the
/// HttpOnly login cookie, valid for 7 days unless logged out or the token is revoked.
#[utoipa::path(
    post,
    path = "/api/login",
    security(()),
    request_body = LoginBody,
    responses(
        (
            status = 200,
            description = "The token is valid; `Set-Cookie` carries a new login session's secret",
            body = AuthStatus,
            headers((
                "Set-Cookie" = String,
                description = "`spool_login=…; HttpOnly; SameSite=Strict; Path=/; Max-Age=604800`"
            ))
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
    let Some((user, secret)) = state.engine.auth().login(body.token.trim()).await? else {
        return Err(ApiError::Unauthorized {
            code: "invalid_token",
            message: "the token is unknown or revoked".into(),
        });
    };
    let secure = state.config.secure_cookies
        || state.config.tls.is_some()
        || headers.get("x-forwarded-proto").and_then(|v| v.to_str().ok()) == Some("https");
    let status = Json(AuthStatus { required: true, user: Some(user) });
    Ok(with_login_cookie(status, &secret, spool_engine::auth::LOGIN_TTL.as_secs(), secure))
}

/// `body` with `Set-Cookie` for the login cookie: `secret` for `max_age` seconds (an
/// empty secret and 0 clear it), `Secure` when the browser reached this server over HTTPS.
fn with_login_cookie(body: impl IntoResponse, secret: &str, max_age: u64, secure: bool) -> Response {
    let secure = if secure { "; Secure" } else { "" };
    let cookie = format!("{AUTH_COOKIE}={secret}; HttpOnly; SameSite=Strict; Path=/; Max-Age={max_age}{secure}");
    let mut response = body.into_response();
    response.headers_mut().insert(header::SET_COOKIE, HeaderValue::from_str(&cookie).expect("an ASCII cookie"));
    response
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct LoggedOut {
    /// Always true.
    logged_out: bool,
}

/// Ends the login session the cookie names (server-side: the old cookie value no
/// longer works, and that session's open streams close) and clears the cookie.
#[utoipa::path(
    post,
    path = "/api/logout",
    security(()),
    responses((
        status = 200,
        description = "The login session is ended and the cookie cleared",
        body = LoggedOut,
        headers(("Set-Cookie" = String, description = "`spool_login=; …; Max-Age=0`"))
    ))
)]
async fn logout(State(state): State<AppState>, headers: HeaderMap) -> Result<Response, ApiError> {
    if let Some(secret) = cookie(&headers, AUTH_COOKIE) {
        state.engine.auth().logout(&secret).await?;
    }
    Ok(with_login_cookie(Json(LoggedOut { logged_out: true }), "", 0, false))
}

/// The body this module reads, parsed as its handler does.
pub(super) const BODIES: &[(&str, BodyCheck)] = &[("POST /api/login", |b| json_body::<LoginBody>(b).map(drop))];
