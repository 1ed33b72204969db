//! The engine's `HubBus` over Redis: published hub events travel like session frames —
//! the same two scripts give each channel a dense seq, a log of the last 256 events /
//! 4 MiB and an epoch — but every node hears every channel on one PUB/SUB channel per
//! deployment (`spool:hub:live`, with the logical database appended past 0), since a
//! subscriber that follows "all channels" cannot be mapped to a list of channels ahead.
//!
//! Keys: `spool:hub:{<channel>}:meta` and `:log` (the channel id as the hash tag; the
//! global channel `""` is `{*}`, which no channel id can spell). A log entry, and the
//! part of a PUB/SUB message after its `<epoch>:<seq>` header, is `<channel>\n<payload>`,
//! sealed (`seal.rs`) for the channel's log: an event is taken from the shared PUB/SUB
//! channel only if a node wrote it for the channel it names.

use crate::keys::Keys;
use crate::seal::{ClusterKey, TAG_LEN};
use crate::{BusError, RedisBus, Replay};
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use spool_engine::BusFailure;
use spool_engine::hub::{HubBus, HubBusItem, HubReplay};
use spool_protocol::Cursor;

/// The PUB/SUB channel of a deployment on logical database `db`.
pub(crate) fn live_channel(db: i64) -> String {
    match db {
        0 => "spool:hub:live".to_owned(),
        db => format!("spool:hub:live:{db}"),
    }
}

fn keys(channel: &str, live: &str) -> Keys {
    let tag = if channel.is_empty() { "*" } else { channel };
    Keys {
        meta: format!("spool:hub:{{{tag}}}:meta"),
        log: format!("spool:hub:{{{tag}}}:log"),
        channel: live.to_owned(),
        watch: String::new(),
    }
}

fn with_channel(channel: &str, payload: &[u8]) -> Bytes {
    let mut framed = Vec::with_capacity(channel.len() + 1 + payload.len());
    framed.extend_from_slice(channel.as_bytes());
    framed.push(b'\n');
    framed.extend_from_slice(payload);
    Bytes::from(framed)
}

/// Splits `<channel>\n<payload>`.
fn split(framed: &Bytes) -> Option<(String, Bytes)> {
    let newline = framed.iter().position(|&b| b == b'\n')?;
    let channel = std::str::from_utf8(&framed[..newline]).ok()?.to_owned();
    Some((channel, framed.slice(newline + 1..)))
}

/// One message of the hub's PUB/SUB channel, if it decodes and a node sealed it for
/// the channel it names (the name is read first to know which log's scope to check).
fn open_live(key: &ClusterKey, live: &str, payload: &[u8]) -> Option<HubBusItem> {
    let decoded = crate::scripts::decode(payload)?;
    let named = split(&decoded.bytes.slice(TAG_LEN.min(decoded.bytes.len())..)).map(|(channel, _)| channel);
    let Some(named) = named else {
        key.refused(live);
        return None;
    };
    let opened = key.open(&keys(&named, live).log, &decoded.bytes)?;
    let (channel, payload) = split(&opened)?;
    Some(HubBusItem { channel, cursor: Cursor { stream_id: decoded.epoch, seq: decoded.seq }, payload })
}

#[async_trait::async_trait]
impl HubBus for RedisBus {
    async fn publish(&self, channel: &str, payloads: &[Bytes]) -> Result<Vec<Cursor>, BusFailure> {
        let framed: Vec<Bytes> = payloads.iter().map(|p| with_channel(channel, p)).collect();
        let mut conn = self.connection();
        let keys = keys(channel, &self.shared.hub_live);
        Ok(self.shared.scripts.publish_many(&mut conn, &self.shared.config, &keys, &framed).await?)
    }

    async fn replay(&self, channel: &str, cursor: &Cursor) -> Result<HubReplay, BusFailure> {
        let mut conn = self.connection();
        let keys = keys(channel, &self.shared.hub_live);
        let replay = self.shared.scripts.replay(&mut conn, &self.shared.config, &keys, Some(cursor)).await?;
        let head = replay.head();
        Ok(match replay {
            Replay::Frames { epoch, frames, .. } if epoch == cursor.stream_id => {
                let payloads: Option<Vec<Bytes>> = frames.iter().map(|f| split(f).map(|(_, p)| p)).collect();
                HubReplay { head, payloads }
            }
            Replay::Frames { .. } | Replay::Snapshot { .. } => HubReplay { head, payloads: None },
        })
    }

    async fn listen(&self) -> Result<BoxStream<'static, HubBusItem>, BusFailure> {
        let mut pubsub = self.shared.client.get_async_pubsub().await.map_err(BusError::from)?;
        pubsub.subscribe(&self.shared.hub_live).await.map_err(BusError::from)?;
        let (key, live) = (self.shared.scripts.key().clone(), self.shared.hub_live.clone());
        Ok(pubsub
            .into_on_message()
            .filter_map(move |message| {
                let item = open_live(&key, &live, message.get_payload_bytes());
                async move { item }
            })
            .boxed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channels_have_their_own_keys_and_share_the_live_channel() {
        let live = live_channel(0);
        let (a, global) = (keys("chan_a", &live), keys("", &live));
        assert_eq!(a.meta, "spool:hub:{chan_a}:meta");
        assert_eq!(global.log, "spool:hub:{*}:log");
        assert_eq!(a.channel, global.channel);
        assert_eq!(live_channel(2), "spool:hub:live:2");
        let framed = with_channel("chan_a", b"{\"x\":\"a\\nb\"}");
        assert_eq!(split(&framed), Some(("chan_a".to_owned(), Bytes::from_static(b"{\"x\":\"a\\nb\"}"))));
        assert_eq!(split(&with_channel("", b"{}")), Some((String::new(), Bytes::from_static(b"{}"))));
    }
}
