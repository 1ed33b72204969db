//! Extractors whose failures are [`ApiError`]s, so no plain-text axum rejection ever
//! reaches a client, and [`CurrentUser`], the one place that decides who is acting.
//!
//! [`Caller`] is the same decision with the credential kept, for streams that must
//! close when it is revoked. Both look the credential up through [`presented`], which
//! `GET /api/auth` also asks, so the token-over-cookie order is written once.
//!
//! Handlers use [`JsonBody`], [`PathId`] and [`QueryParams`] instead of axum's `Json`,
//! `Path` and `Query` extractors. (Responses still use `axum::Json`.)

use crate::error::ApiError;
use crate::state::AppState;
use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;
use spool_engine::Engine;
use spool_engine::auth::Credential;
use spool_protocol::{ApprovalId, IdError, MessageId, ProjectId, RunId, SessionId, UserId};
use std::str::FromStr;

/// The user a request acts as: every route that touches a user's data takes this.
///
/// While auth is off (loopback only) it is the engine's local user. Otherwise the
/// request must carry a token in `Authorization: Bearer …`, or — for browsers, whose
/// EventSource and WebSocket cannot set headers — the HttpOnly cookie of a login
/// session (`POST /api/login`; never the token itself). A cookie-authenticated state
/// change must come from the server's own origin, so another site cannot ride a
/// logged-in browser. Streams take [`Caller`] instead, to know the credential.
#[derive(Clone, Debug)]
pub struct CurrentUser(pub UserId);

/// The engine and the user a request acts as: what most handlers need, in one
/// extractor (the application state's engine and [`CurrentUser`]), so a handler that
/// does one thing for its caller says so in one argument.
#[derive(Clone)]
pub struct Acting {
    pub engine: Engine,
    pub user: UserId,
}

impl FromRequestParts<AppState> for Acting {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let CurrentUser(user) = CurrentUser::from_request_parts(parts, state).await?;
        Ok(Acting { engine: state.engine.clone(), user })
    }
}

/// The user a request acts as and the credential it authenticated with, which a
/// long-lived stream registers so that revoking the credential closes it.
#[derive(Clone, Debug)]
pub struct Caller {
    pub user: UserId,
    pub credential: Credential,
}

/// Name of the login cookie (it holds a login session's secret).
pub const AUTH_COOKIE: &str = "spool_login";

impl FromRequestParts<AppState> for CurrentUser {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        Caller::from_request_parts(parts, state).await.map(|caller| CurrentUser(caller.user))
    }
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        if !state.engine.auth().auth_required().await? {
            return Ok(Caller { user: state.engine.local_user().clone(), credential: Credential::Local });
        }
        let (user, credential, via_cookie) = match presented(state, &parts.headers).await? {
            Presented::Known { user, credential, via_cookie } => (user, credential, via_cookie),
            Presented::Nothing => {
                return Err(ApiError::Unauthorized {
                    code: "unauthorized",
                    message: "this server requires a token: send `Authorization: Bearer <token>` or log in".into(),
                });
            }
            Presented::Unknown => {
                return Err(ApiError::Unauthorized {
                    code: "invalid_token",
                    message: "the token or login is unknown, revoked, ended or expired".into(),
                });
            }
        };
        let safe =
            matches!(parts.method, axum::http::Method::GET | axum::http::Method::HEAD | axum::http::Method::OPTIONS);
        if via_cookie && !safe && !same_origin(&parts.headers) {
            return Err(ApiError::Forbidden {
                code: "bad_origin",
                message: "a cookie-authenticated change must come from this server's own pages".into(),
            });
        }
        Ok(Caller { user, credential })
    }
}

/// What a request presents to authenticate with, as the engine knows it.
pub(crate) enum Presented {
    /// Neither a bearer token nor a login cookie.
    Nothing,
    /// A token or login the engine does not know: unknown, revoked, ended or expired.
    Unknown,
    /// A live credential, and whether it came as the login cookie.
    Known { user: UserId, credential: Credential, via_cookie: bool },
}

/// The request's bearer token or, without one, its login cookie, looked up. Whether
/// the server requires either is the caller's question.
pub(crate) async fn presented(state: &AppState, headers: &axum::http::HeaderMap) -> Result<Presented, ApiError> {
    let (found, via_cookie) = match bearer(headers) {
        Some(secret) => (state.engine.auth().authenticate_token(secret).await?, false),
        None => match cookie(headers, AUTH_COOKIE) {
            Some(secret) => (state.engine.auth().authenticate_login(&secret).await?, true),
            None => return Ok(Presented::Nothing),
        },
    };
    Ok(match found {
        Some((user, credential)) => Presented::Known { user, credential, via_cookie },
        None => Presented::Unknown,
    })
}

/// The `Authorization: Bearer` secret, if the request has one.
pub fn bearer(headers: &axum::http::HeaderMap) -> Option<&str> {
    headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
}

/// The value of cookie `name`, if the request has it.
pub fn cookie(headers: &axum::http::HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_owned())
}

/// True when `Origin` names the host the request was sent to (see
/// [`crate::guard::same_origin`], the one definition every origin check uses).
pub fn same_origin(headers: &axum::http::HeaderMap) -> bool {
    crate::guard::same_origin(headers, None)
}

/// A JSON request body. Unknown fields are ignored; wrong types, bad syntax, a wrong
/// content type and an oversized body are JSON errors.
#[derive(Debug)]
pub struct JsonBody<T>(pub T);

impl<S, T> FromRequest<S> for JsonBody<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(value)) => Ok(JsonBody(value)),
            Err(rejection) => Err(json_rejection(rejection)),
        }
    }
}

/// What [`JsonBody`] makes of a JSON body's bytes: the same parse, the same errors.
/// Handler modules list their bodies with it for the fuzz targets (`crate::fuzzing`).
pub(crate) fn json_body<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    axum::Json::<T>::from_bytes(bytes).map(|axum::Json(value)| value).map_err(json_rejection)
}

/// Parses and checks one route's request body; `Ok` when the handler would go on.
///
/// Every handler module that reads a JSON body lists it in a `BODIES` table of these,
/// which `http::request_bodies` gathers for the fuzz targets (`crate::fuzzing`). It
/// lives here, beside [`json_body`], so a handler module names it without importing
/// the fuzzing side that reads the tables.
pub(crate) type BodyCheck = fn(&[u8]) -> Result<(), ApiError>;

fn json_rejection(rejection: JsonRejection) -> ApiError {
    match rejection {
        JsonRejection::JsonSyntaxError(e) => ApiError::bad_request("malformed_json", e.body_text()),
        JsonRejection::JsonDataError(e) => ApiError::bad_request("invalid_body", e.body_text()),
        JsonRejection::MissingJsonContentType(_) => {
            ApiError::UnsupportedMediaType("the request body must be JSON with `Content-Type: application/json`".into())
        }
        other if other.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            ApiError::BodyTooLarge("the request body is larger than the server accepts".into())
        }
        other => ApiError::bad_request("invalid_body", other.body_text()),
    }
}

/// An id type that can appear in a path, with the word a 404 uses for it.
pub trait ApiId: FromStr<Err = IdError> + Send {
    const WHAT: &'static str;
}

impl ApiId for ProjectId {
    const WHAT: &'static str = "project";
}
impl ApiId for spool_protocol::AttachmentId {
    const WHAT: &'static str = "attachment";
}
impl ApiId for SessionId {
    const WHAT: &'static str = "session";
}
impl ApiId for ApprovalId {
    const WHAT: &'static str = "approval";
}

impl ApiId for MessageId {
    const WHAT: &'static str = "message";
}
impl ApiId for spool_protocol::DeliveryId {
    const WHAT: &'static str = "delivery";
}
impl ApiId for RunId {
    const WHAT: &'static str = "run";
}

/// `raw` as the id it names, or the 404 `not_found` of an id that names nothing: a
/// client's id string, from a path or a body, becomes a typed id here.
pub(crate) fn parse_id<T: ApiId>(raw: &str) -> Result<T, ApiError> {
    raw.parse().map_err(|_| ApiError::not_found(T::WHAT))
}

/// The single `{id}` of a route, parsed as a typed id. A string that is not a valid id
/// names nothing, so it is a 404 `not_found` exactly like a well-formed id that is absent.
#[derive(Debug)]
pub struct PathId<T>(pub T);

impl<S, T> FromRequestParts<S> for PathId<T>
where
    T: ApiId,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Path(raw) =
            Path::<String>::from_request_parts(parts, state).await.map_err(|_| ApiError::not_found(T::WHAT))?;
        parse_id(&raw).map(PathId)
    }
}

/// Query parameters; unknown ones are ignored, a bad value is a 400 `invalid_query`.
#[derive(Debug)]
pub struct QueryParams<T>(pub T);

impl<S, T> FromRequestParts<S> for QueryParams<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match Query::<T>::from_request_parts(parts, state).await {
            Ok(Query(value)) => Ok(QueryParams(value)),
            Err(rejection) => Err(ApiError::bad_request("invalid_query", rejection.body_text())),
        }
    }
}

/// Two typed ids from the path (`/api/sessions/{id}/approvals/{approvalId}`); either
/// failing to parse is a 404 for what it names.
#[derive(Debug)]
pub struct PathIds<A, B>(pub A, pub B);

impl<S, A, B> FromRequestParts<S> for PathIds<A, B>
where
    A: ApiId,
    B: ApiId,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Path((a, b)) = Path::<(String, String)>::from_request_parts(parts, state)
            .await
            .map_err(|_| ApiError::not_found(A::WHAT))?;
        Ok(PathIds(parse_id(&a)?, parse_id(&b)?))
    }
}
