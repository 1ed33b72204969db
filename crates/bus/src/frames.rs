//! The engine's [`FrameBus`] over [`RedisBus`]: what a node's sessions follow when
//! `--redis-url` is set. A thin mapping; the contract is the bus's (see the crate doc).

use crate::{Item, RedisBus, Replay};
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use spool_engine::framebus::Watchers;
use spool_engine::{BusFailure, BusItem, FrameBus};
use spool_protocol::{Cursor, SessionId};

#[async_trait::async_trait]
impl FrameBus for RedisBus {
    async fn publish(&self, session: &SessionId, payloads: &[Bytes]) -> Result<Vec<Cursor>, BusFailure> {
        Ok(RedisBus::publish_many(self, session, payloads).await?)
    }

    async fn replay(&self, session: &SessionId, cursor: &Cursor) -> Result<Option<Vec<Bytes>>, BusFailure> {
        Ok(match RedisBus::replay(self, session, Some(cursor)).await? {
            Replay::Frames { epoch, frames, .. } if epoch == cursor.stream_id => Some(frames),
            Replay::Frames { .. } | Replay::Snapshot { .. } => None,
        })
    }

    async fn set_watchers(&self, session: &SessionId, node: &str, watchers: Watchers) -> Result<(), BusFailure> {
        Ok(crate::watchers::set(&mut self.connection(), self.shared.scripts.key(), session, node, watchers).await?)
    }

    async fn watchers(&self, session: &SessionId) -> Result<Vec<(String, Watchers)>, BusFailure> {
        Ok(crate::watchers::all(&mut self.connection(), self.shared.scripts.key(), session).await?)
    }

    async fn check(&self) -> Result<(), BusFailure> {
        Ok(RedisBus::check(self).await?)
    }

    fn rejected_messages(&self) -> u64 {
        self.rejected()
    }

    fn hub_bus(&self) -> Option<std::sync::Arc<dyn spool_engine::hub::HubBus>> {
        Some(std::sync::Arc::new(self.clone()))
    }

    async fn listen(
        &self,
        session: &SessionId,
        cursor: Option<&Cursor>,
    ) -> Result<BoxStream<'static, BusItem>, BusFailure> {
        let listener = RedisBus::listen(self, session, cursor).await?;
        Ok(listener
            .map(|item| {
                let cursor = item.cursor();
                match item {
                    Item::Frame { bytes, .. } => BusItem::Frame { cursor, payload: bytes },
                    Item::Reset { .. } => BusItem::Reset { cursor },
                }
            })
            .boxed())
    }
}
