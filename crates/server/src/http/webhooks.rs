//! The outbox's deliveries as their owner sees them (issue 41):
//! `GET /api/webhooks/deliveries?status=` lists the deliveries of the caller's own
//! events (webhooks and Web Push alike; an operator sees every user's with `spool
//! webhook list`), and `POST /api/webhooks/deliveries/{id}/replay` sends one that is not
//! pending (a dead letter, usually) again from its first try, under the same event id,
//! so a receiver that processed it already knows it by that id.

use super::responses::{ReadErrors, WriteErrors};
use crate::error::ApiError;
use crate::extract::{Acting, PathId, QueryParams};
use crate::state::AppState;
use axum::Json;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use spool_engine::{Delivery, DeliveryStatus};
use spool_protocol::DeliveryId;
use spool_protocol::time::Millis;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// Most deliveries one list returns.
const LIST_LIMIT: u32 = 200;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list)).routes(routes!(replay))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct ListQuery {
    /// Only deliveries in this state: `pending`, `delivered`, `dead` or `skipped`.
    status: Option<String>,
}

/// One event on its way to one target.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = webhooks::Delivery)]
struct DeliveryView {
    /// `dlv_…`.
    id: String,
    /// The event's id: the `webhook-id` of every try.
    event_id: String,
    /// `session.created`, `approval.requested`, `approval.resolved`, `question.asked`, `run.settled`.
    event_type: String,
    /// `webhook:<name>` or `push:<subscription>`.
    target: String,
    /// `pending`, `delivered`, `dead` or `skipped`.
    status: String,
    attempts: u32,
    /// When the next try is due (ms since the epoch), while pending.
    next_at: Millis,
    last_status: Option<u16>,
    last_error: Option<String>,
    created_at: Millis,
    delivered_at: Option<Millis>,
    /// The event's public data (redacted: never message text or raw arguments).
    #[schema(value_type = Object)]
    data: serde_json::Value,
}

impl From<Delivery> for DeliveryView {
    fn from(d: Delivery) -> Self {
        DeliveryView {
            id: d.id.to_string(),
            event_id: d.event.id.to_string(),
            event_type: d.event.kind.as_str().to_owned(),
            target: d.target,
            status: d.status.as_str().to_owned(),
            attempts: d.attempts,
            next_at: d.next_at,
            last_status: d.last_status,
            last_error: d.last_error,
            created_at: d.created_at,
            delivered_at: d.delivered_at,
            data: d.event.data,
        }
    }
}

#[derive(Serialize, ToSchema)]
#[schema(as = webhooks::Deliveries)]
struct Deliveries {
    /// Newest first, at most 200.
    deliveries: Vec<DeliveryView>,
}

/// The deliveries of the caller's events, newest first.
#[utoipa::path(
    get,
    path = "/api/webhooks/deliveries",
    params(ListQuery),
    responses((status = 200, body = Deliveries), ReadErrors)
)]
async fn list(
    Acting { engine, user }: Acting,
    QueryParams(query): QueryParams<ListQuery>,
) -> Result<Json<Deliveries>, ApiError> {
    let status = match query.status.as_deref() {
        None | Some("") => None,
        Some(text) => Some(DeliveryStatus::parse(text).ok_or_else(|| {
            ApiError::bad_request("invalid_status", "status is one of pending, delivered, dead, skipped")
        })?),
    };
    let found = engine.store_handle().list_deliveries(Some(&user), status, LIST_LIMIT).await.map_err(store_error)?;
    Ok(Json(Deliveries { deliveries: found.into_iter().map(DeliveryView::from).collect() }))
}

/// Sends a finished delivery of the caller's again from its first try (same event id).
/// 404 when there is no such delivery of the caller's, or it is pending already.
#[utoipa::path(
    post,
    path = "/api/webhooks/deliveries/{id}/replay",
    params(("id" = String, Path, description = "The delivery's id (`dlv_…`).")),
    responses((status = 202, description = "Pending again, due now."), WriteErrors)
)]
async fn replay(Acting { engine, user }: Acting, PathId(id): PathId<DeliveryId>) -> Result<StatusCode, ApiError> {
    let now = spool_protocol::time::now_ms();
    if engine.store_handle().replay_delivery(&id, Some(&user), now).await.map_err(store_error)? {
        Ok(StatusCode::ACCEPTED)
    } else {
        Err(ApiError::not_found("finished delivery"))
    }
}

fn store_error(e: spool_engine::StoreError) -> ApiError {
    ApiError::Engine(e.into())
}
