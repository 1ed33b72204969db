//! The two Lua scripts that touch a session's keys, and the PUB/SUB message format they
//! write. A script runs atomically in Redis, so "read the epoch, bump the seq, append,
//! trim, publish" is one step that no other node can interleave with.
//!
//! Frames go into the scripts sealed (`seal.rs`: the cluster key's tag for the log's
//! name, then the frame) and come out of a replay opened; a log entry that does not
//! open answers "snapshot needed", like an entry that is missing.

use crate::keys::Keys;
use crate::seal::ClusterKey;
use crate::{BusConfig, BusError};
use bytes::Bytes;
use redis::Script;
use redis::aio::ConnectionManager;
use spool_protocol::{Cursor, StreamId};

/// Publishes one frame. KEYS: meta, log. ARGV: a fresh epoch (used only when the session
/// has none), the frame, history frames, history bytes, ttl in ms, channel.
///
/// A missing `meta` hash means the session never published or Redis lost it (restart
/// without persistence, eviction, FLUSHALL): a new epoch starts at seq 1 and whatever is
/// left of the old log goes, so no old entry can be mistaken for one of the new epoch.
/// A log lost on its own (evicted alone) only resets the byte counter: the seq goes on,
/// and replays over the lost stretch answer "snapshot needed".
///
/// Trimming is one loop, oldest first, rather than `XADD … MAXLEN`, because the byte
/// counter must subtract exactly the entries that go. In the steady state it removes one
/// entry per publish. The newest entry always stays, whatever its size.
const PUBLISH: &str = r#"
local meta, log = KEYS[1], KEYS[2]
local fresh, frame = ARGV[1], ARGV[2]
local max_frames, max_bytes, ttl = tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local channel = ARGV[6]

local epoch = redis.call('HGET', meta, 'epoch')
if not epoch then
  epoch = fresh
  redis.call('DEL', log)
  redis.call('HSET', meta, 'epoch', epoch, 'seq', 0, 'bytes', 0)
elseif redis.call('EXISTS', log) == 0 then
  redis.call('HSET', meta, 'bytes', 0)
end

local seq = redis.call('HINCRBY', meta, 'seq', 1)
local seq_text = string.format('%d', seq)
redis.call('XADD', log, seq_text .. '-0', 'f', frame)
local bytes = redis.call('HINCRBY', meta, 'bytes', #frame)

local len = redis.call('XLEN', log)
while len > 1 and (len > max_frames or bytes > max_bytes) do
  local oldest = redis.call('XRANGE', log, '-', '+', 'COUNT', 1)[1]
  bytes = bytes - #oldest[2][2]
  redis.call('XDEL', log, oldest[1])
  len = len - 1
end
redis.call('HSET', meta, 'bytes', bytes)

redis.call('PEXPIRE', meta, ttl)
redis.call('PEXPIRE', log, ttl)
redis.call('PUBLISH', channel, epoch .. ':' .. seq_text .. '\n' .. frame)
return {epoch, seq}
"#;

/// Reads what a cursor missed. KEYS: meta, log. ARGV: a fresh epoch, the cursor's epoch
/// ("" for none), the cursor's seq, ttl in ms.
///
/// Returns `{epoch, seq, 1, frames}` when the log holds every frame after the cursor
/// (`frames` may be empty), `{epoch, seq, 0, {}}` when a snapshot is needed. A session
/// without an epoch gets one here at seq 0, so every answer names a real position that
/// later frames continue from.
const REPLAY: &str = r#"
local meta, log = KEYS[1], KEYS[2]
local fresh, want, after, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]

local state = redis.call('HMGET', meta, 'epoch', 'seq')
local epoch, seq = state[1], tonumber(state[2])
if not epoch then
  epoch, seq = fresh, 0
  redis.call('DEL', log)
  redis.call('HSET', meta, 'epoch', epoch, 'seq', 0, 'bytes', 0)
  redis.call('PEXPIRE', meta, ttl)
end

if want ~= epoch or after > seq then
  return {epoch, seq, 0, {}}
end
if after == seq then
  return {epoch, seq, 1, {}}
end
local entries = redis.call('XRANGE', log, string.format('%d', after + 1) .. '-0', string.format('%d', seq) .. '-0')
if #entries ~= seq - after then
  return {epoch, seq, 0, {}}
end
local frames = {}
for i, entry in ipairs(entries) do
  frames[i] = entry[2][2]
end
return {epoch, seq, 1, frames}
"#;

/// What a cursor gets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Replay {
    /// Every frame after the cursor, in order: seqs `after + 1 ..= seq`. May be empty.
    Frames { epoch: StreamId, seq: u64, frames: Vec<Bytes> },
    /// The cursor cannot be continued (another epoch, trimmed away, from the future, or
    /// none given): take a snapshot at `seq`; frames after it follow.
    Snapshot { epoch: StreamId, seq: u64 },
}

impl Replay {
    /// The position the caller is at once it has taken this answer.
    pub fn head(&self) -> Cursor {
        match self {
            Replay::Frames { epoch, seq, .. } | Replay::Snapshot { epoch, seq } => {
                Cursor { stream_id: epoch.clone(), seq: *seq }
            }
        }
    }
}

/// The scripts, hashed once per bus (`EVALSHA`, falling back to loading them after a
/// Redis restart answers `NOSCRIPT`), and the key that seals and opens their frames.
pub(crate) struct Scripts {
    publish: Script,
    replay: Script,
    key: ClusterKey,
}

impl Scripts {
    pub fn new(key: ClusterKey) -> Self {
        Self { publish: Script::new(PUBLISH), replay: Script::new(REPLAY), key }
    }

    /// The key frames are sealed with, to open live messages with.
    pub fn key(&self) -> &ClusterKey {
        &self.key
    }

    pub async fn publish(
        &self,
        conn: &mut ConnectionManager,
        config: &BusConfig,
        keys: &Keys,
        frame: &[u8],
    ) -> Result<Cursor, BusError> {
        let sealed = self.key.seal(&keys.log, frame);
        let (epoch, seq): (String, u64) = self
            .publish
            .key(&keys.meta)
            .key(&keys.log)
            .arg(StreamId::new().as_str())
            .arg(sealed.as_ref())
            .arg(config.history_frames)
            .arg(config.history_bytes)
            .arg(ttl_ms(config))
            .arg(&keys.channel)
            .invoke_async(conn)
            .await?;
        Ok(Cursor { stream_id: parse_epoch(&epoch)?, seq })
    }

    /// Publishes `frames` in order with one round trip: the script is loaded (a no-op
    /// when Redis has it) and invoked once per frame in one pipeline. Redis runs each
    /// invocation atomically and in order; if the pipeline fails part-way, the frames
    /// before the failure may have been appended.
    pub async fn publish_many(
        &self,
        conn: &mut ConnectionManager,
        config: &BusConfig,
        keys: &Keys,
        frames: &[Bytes],
    ) -> Result<Vec<Cursor>, BusError> {
        if let [frame] = frames {
            return Ok(vec![self.publish(conn, config, keys, frame).await?]);
        }
        let epoch = StreamId::new();
        let invocations: Vec<_> = frames
            .iter()
            .map(|frame| {
                let mut invocation = self.publish.key(&keys.meta);
                invocation
                    .key(&keys.log)
                    .arg(epoch.as_str())
                    .arg(self.key.seal(&keys.log, frame).as_ref())
                    .arg(config.history_frames)
                    .arg(config.history_bytes)
                    .arg(ttl_ms(config))
                    .arg(&keys.channel);
                invocation
            })
            .collect();
        let mut pipe = redis::pipe();
        pipe.load_script(&self.publish).ignore();
        for invocation in &invocations {
            pipe.invoke_script(invocation);
        }
        let answers: Vec<(String, u64)> = pipe.query_async(conn).await?;
        answers.into_iter().map(|(epoch, seq)| Ok(Cursor { stream_id: parse_epoch(&epoch)?, seq })).collect()
    }

    pub async fn replay(
        &self,
        conn: &mut ConnectionManager,
        config: &BusConfig,
        keys: &Keys,
        cursor: Option<&Cursor>,
    ) -> Result<Replay, BusError> {
        let (want, after) = match cursor {
            Some(c) => (c.stream_id.as_str(), c.seq),
            None => ("", 0),
        };
        let (epoch, seq, ok, frames): (String, u64, u8, Vec<Bytes>) = self
            .replay
            .key(&keys.meta)
            .key(&keys.log)
            .arg(StreamId::new().as_str())
            .arg(want)
            .arg(after)
            .arg(ttl_ms(config))
            .invoke_async(conn)
            .await?;
        let epoch = parse_epoch(&epoch)?;
        if ok != 1 {
            return Ok(Replay::Snapshot { epoch, seq });
        }
        // A frame no node wrote stands for a lost one: the reader takes a snapshot.
        let opened: Option<Vec<Bytes>> = frames.iter().map(|frame| self.key.open(&keys.log, frame)).collect();
        Ok(match opened {
            Some(frames) => Replay::Frames { epoch, seq, frames },
            None => Replay::Snapshot { epoch, seq },
        })
    }
}

fn ttl_ms(config: &BusConfig) -> u64 {
    u64::try_from(config.ttl.as_millis()).unwrap_or(u64::MAX).max(1)
}

fn parse_epoch(raw: &str) -> Result<StreamId, BusError> {
    raw.parse().map_err(|_| BusError::Malformed(format!("epoch `{}`", raw.chars().take(64).collect::<String>())))
}

/// A frame as it arrives on a session's channel.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Message {
    pub epoch: StreamId,
    pub seq: u64,
    pub bytes: Bytes,
}

/// Splits `<epoch>:<seq>\n<bytes>` (what [`PUBLISH`] sends). `None` for anything else:
/// a message the bus cannot place is treated as lost, and the next one fills the gap.
pub(crate) fn decode(payload: &[u8]) -> Option<Message> {
    let newline = payload.iter().position(|&b| b == b'\n')?;
    let header = std::str::from_utf8(&payload[..newline]).ok()?;
    let cursor = Cursor::parse(header)?;
    Some(Message { epoch: cursor.stream_id, seq: cursor.seq, bytes: Bytes::copy_from_slice(&payload[newline + 1..]) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_what_the_script_sends() {
        let epoch = StreamId::new();
        let payload = format!("{epoch}:42\n{{\"a\":\"x\\ny\"}}\n");
        let message = decode(payload.as_bytes()).expect("well formed");
        assert_eq!(message, Message { epoch, seq: 42, bytes: Bytes::from_static(b"{\"a\":\"x\\ny\"}\n") });
    }

    #[test]
    fn refuses_what_it_cannot_place() {
        for payload in [&b""[..], b"no newline", b"stm_bad:1\nx", b"\nx"] {
            assert_eq!(decode(payload), None, "{payload:?}");
        }
    }
}
