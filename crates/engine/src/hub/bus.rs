//! The seam through which published hub events reach every node: the engine defines
//! it, `spool_bus` implements it over Redis (the same scripts as session frames: a dense
//! seq per channel, a bounded log, an epoch that plays the part of `streamId`). One
//! node on its own has none, and its [`Hub`](super::Hub) numbers events itself.
//!
//! Unlike session frames, which a node follows per loaded session, every node hears
//! every channel: published events are few beside token deltas, and a subscriber with
//! an empty ("all") filter wants every channel granted to it, which no node could list
//! in advance. So a node has one listener for the whole hub.

use crate::BusFailure;
use bytes::Bytes;
use futures::stream::BoxStream;
use spool_protocol::Cursor;

/// One event as the bus delivers it: its channel (`""` for global events), its cursor,
/// and the payload the publishing node wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HubBusItem {
    pub channel: String,
    pub cursor: Cursor,
    pub payload: Bytes,
}

/// What a cursor gets from the bus's log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HubReplay {
    /// Where the channel is now (its last event's cursor, seq 0 before any).
    pub head: Cursor,
    /// Every payload after the cursor, in order, or `None` when the log no longer holds
    /// them all (or the cursor is of another epoch, or ahead).
    pub payloads: Option<Vec<Bytes>>,
}

#[async_trait::async_trait]
pub trait HubBus: Send + Sync + 'static {
    /// Appends payloads to a channel's log, in order, and delivers them to every node's
    /// [`listen`](Self::listen); returns their cursors. A failed publish may have
    /// appended a prefix.
    async fn publish(&self, channel: &str, payloads: &[Bytes]) -> Result<Vec<Cursor>, BusFailure>;

    /// The payloads after `cursor` (see [`HubReplay`]).
    async fn replay(&self, channel: &str, cursor: &Cursor) -> Result<HubReplay, BusFailure>;

    /// Every channel's events from now on, as published. The stream ends when the link
    /// drops; listening again continues (a gap shows as a seq that skips, and the
    /// caller fills it with [`replay`](Self::replay)).
    async fn listen(&self) -> Result<BoxStream<'static, HubBusItem>, BusFailure>;
}
