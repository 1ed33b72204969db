//! Web Push (issue 41): a browser that turned notifications on gives the server its
//! push subscription, and the server then tells it when an approval or a question
//! waits (see `spool_reach::push`).
//!
//! `GET /api/push/key` gives the public key a page subscribes with
//! (`applicationServerKey`); `POST /api/push/subscriptions` takes the browser's
//! `PushSubscription.toJSON()` and answers its id; `GET` lists the caller's; `GET` and
//! `DELETE …/{id}` read or remove one (another user's is 404); `POST …/{id}/test` sends
//! a test notification and says what the push service answered.

use super::responses::{ReadErrors, WriteErrors};
use crate::error::ApiError;
use crate::extract::{BodyCheck, Caller, JsonBody, json_body};
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use serde::Serialize;
use spool_engine::auth::Credential;
use spool_engine::store::PushSubscription;
use spool_protocol::UserId;
use spool_reach::dispatch::Attempt;
use spool_reach::push::SubscriptionJson;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(key))
        .routes(routes!(subscribe, list))
        .routes(routes!(get_one, unsubscribe))
        .routes(routes!(test))
}

/// The server's VAPID public key.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = push::PushKey)]
struct PushKey {
    /// The uncompressed P-256 point, base64url: `pushManager.subscribe`'s
    /// `applicationServerKey`. The same on every node of a deployment.
    public_key: String,
}

/// A browser's `PushSubscription.toJSON()`.
#[derive(serde::Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = push::SubscriptionBody)]
#[allow(dead_code)] // Read through `SubscriptionJson`; this is its schema.
struct SubscriptionBody {
    /// The push service's URL for this browser: `https`, a host name (not an address).
    endpoint: String,
    /// Ignored.
    expiration_time: Option<serde_json::Value>,
    keys: SubscriptionKeysBody,
}

#[derive(serde::Deserialize, ToSchema)]
#[schema(as = push::SubscriptionKeys)]
#[allow(dead_code)]
struct SubscriptionKeysBody {
    /// The browser's P-256 public key, base64url.
    p256dh: String,
    /// The browser's 16-byte auth secret, base64url.
    auth: String,
}

/// A stored subscription, without its keys.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = push::Subscription)]
struct SubscriptionView {
    /// `psub_…`.
    id: String,
    endpoint: String,
    user_agent: Option<String>,
    created_at: i64,
    /// When a push last reached its service.
    last_ok_at: Option<i64>,
    /// Tries that failed since then.
    failures: u32,
}

impl From<PushSubscription> for SubscriptionView {
    fn from(s: PushSubscription) -> Self {
        SubscriptionView {
            id: s.id,
            endpoint: s.endpoint,
            user_agent: s.user_agent,
            created_at: s.created_at,
            last_ok_at: s.last_ok_at,
            failures: s.failures,
        }
    }
}

#[derive(Serialize, ToSchema)]
#[schema(as = push::Subscriptions)]
struct Subscriptions {
    subscriptions: Vec<SubscriptionView>,
}

#[derive(Serialize, ToSchema)]
#[schema(as = push::Subscribed)]
struct Subscribed {
    /// `psub_…`: the same id when this endpoint was subscribed before.
    id: String,
}

/// What a test push came to.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = push::TestPush)]
struct TestPush {
    /// Whether the push service took it.
    delivered: bool,
    /// The push service's HTTP status, if it answered.
    status: Option<u16>,
    /// Why not, when not.
    error: Option<String>,
}

/// Each body this module reads, parsed as its handler does.
pub(super) const BODIES: &[(&str, BodyCheck)] =
    &[("POST /api/push/subscriptions", |b| json_body::<SubscriptionJson>(b).map(drop))];

/// The public key browsers subscribe with.
#[utoipa::path(get, path = "/api/push/key", responses((status = 200, body = PushKey), ReadErrors))]
async fn key(State(state): State<AppState>, _caller: Caller) -> Result<Json<PushKey>, ApiError> {
    let public_key = state.push.public_key().await.map_err(internal)?;
    Ok(Json(PushKey { public_key }))
}

/// Takes a browser's push subscription for the caller. Subscribing an endpoint again
/// updates its row (new keys, this caller) and keeps its id. 400 `invalid_endpoint`
/// for an endpoint that is not `https` with a host name, or keys that are not a P-256
/// public key and a 16-byte secret.
#[utoipa::path(
    post,
    path = "/api/push/subscriptions",
    request_body = SubscriptionBody,
    responses((status = 201, body = Subscribed), WriteErrors)
)]
async fn subscribe(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    JsonBody(body): JsonBody<SubscriptionJson>,
) -> Result<(StatusCode, Json<Subscribed>), ApiError> {
    let login = match &caller.credential {
        Credential::Local => None,
        Credential::Token(token) => Some(token.to_string()),
        Credential::Login { id, .. } => Some(id.to_string()),
    };
    let user_agent = headers.get(header::USER_AGENT).and_then(|v| v.to_str().ok()).map(str::to_owned);
    match state.push.subscribe(&caller.user, login, &body, user_agent).await.map_err(internal)? {
        Ok(saved) => Ok((StatusCode::CREATED, Json(Subscribed { id: saved.id }))),
        Err(refused) => Err(ApiError::bad_request("invalid_endpoint", refused.to_string())),
    }
}

/// The caller's subscriptions, oldest first.
#[utoipa::path(get, path = "/api/push/subscriptions", responses((status = 200, body = Subscriptions), ReadErrors))]
async fn list(State(state): State<AppState>, caller: Caller) -> Result<Json<Subscriptions>, ApiError> {
    let found = state.push.store().push_subscriptions(&caller.user).await.map_err(store_error)?;
    Ok(Json(Subscriptions { subscriptions: found.into_iter().map(Into::into).collect() }))
}

/// One of the caller's subscriptions.
#[utoipa::path(
    get,
    path = "/api/push/subscriptions/{id}",
    params(("id" = String, Path)),
    responses((status = 200, body = SubscriptionView), ReadErrors)
)]
async fn get_one(
    State(state): State<AppState>,
    caller: Caller,
    Psub(id): Psub,
) -> Result<Json<SubscriptionView>, ApiError> {
    Ok(Json(owned(&state, &caller.user, &id).await?.into()))
}

/// Removes one of the caller's subscriptions: that browser is told nothing more, and
/// the decision tokens its notifications carry stop working.
#[utoipa::path(
    delete,
    path = "/api/push/subscriptions/{id}",
    params(("id" = String, Path)),
    responses((status = 204, description = "Removed"), WriteErrors)
)]
async fn unsubscribe(State(state): State<AppState>, caller: Caller, Psub(id): Psub) -> Result<StatusCode, ApiError> {
    let subscription = owned(&state, &caller.user, &id).await?;
    state.push.store().delete_push_subscription(&subscription.id).await.map_err(store_error)?;
    Ok(StatusCode::NO_CONTENT)
}

/// Sends a test notification to one of the caller's subscriptions now.
#[utoipa::path(
    post,
    path = "/api/push/subscriptions/{id}/test",
    params(("id" = String, Path)),
    responses((status = 200, body = TestPush), WriteErrors)
)]
async fn test(State(state): State<AppState>, caller: Caller, Psub(id): Psub) -> Result<Json<TestPush>, ApiError> {
    let subscription = owned(&state, &caller.user, &id).await?;
    let answer = match state.push.send_test(&subscription).await {
        Attempt::Delivered { status } => TestPush { delivered: true, status: Some(status), error: None },
        Attempt::Retry { status, error, .. } => TestPush { delivered: false, status, error: Some(error) },
        Attempt::Dead { status, reason } => TestPush { delivered: false, status, error: Some(reason) },
        Attempt::Skipped { reason } => TestPush { delivered: false, status: None, error: Some(reason) },
    };
    Ok(Json(answer))
}

/// A subscription id from the path (`psub_…`); one that cannot be read names nothing.
struct Psub(String);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Psub {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, state: &S) -> Result<Self, ApiError> {
        let axum::extract::Path(id) = axum::extract::Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|_| ApiError::not_found("push subscription"))?;
        Ok(Psub(id))
    }
}

/// The subscription `id` if `user` owns it; another user's is not found.
async fn owned(state: &AppState, user: &UserId, id: &str) -> Result<PushSubscription, ApiError> {
    match state.push.store().get_push_subscription(id).await.map_err(store_error)? {
        Some(subscription) if &subscription.owner_id == user => Ok(subscription),
        _ => Err(ApiError::not_found("push subscription")),
    }
}

fn store_error(e: spool_engine::StoreError) -> ApiError {
    ApiError::Engine(e.into())
}

fn internal(e: impl std::fmt::Display) -> ApiError {
    tracing::error!(error = %format!("{e:#}"), "web push");
    ApiError::Internal
}
