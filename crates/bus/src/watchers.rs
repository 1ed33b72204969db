//! Who watches a session, across nodes: each node records in one hash per session how
//! many clients it has on the session's stream (and how many of them are interactive
//! views), so the node running the session can tell "nobody anywhere" (a prompt's
//! `onDisconnect: "cancel"`) and "no person who could answer" (`--approval-policy
//! deny`) as a single node does.
//!
//! An entry is `<streams> <interactive> <expires-at ms>` under the node's id. A node
//! rewrites it when its counts change and refreshes it well before it expires; a node
//! that died stops refreshing, and readers skip its entry once the time has passed (the
//! key itself expires a while after the last write from anyone). Clocks of the nodes
//! need only agree to within the entry's lifetime, minus the refresh period.
//!
//! Entries are sealed like every other thing a node writes (`seal.rs`), for the hash and
//! the node they are stored under: a made-up entry (keeping a run alive that should end
//! with its last watcher, or an approval waiting with nobody there) counts for nothing,
//! and a node's genuine entry replayed later has long expired.

use crate::keys::Keys;
use crate::seal::ClusterKey;
use bytes::Bytes;
use redis::AsyncCommands;
use redis::aio::ConnectionManager;
use spool_engine::framebus::Watchers;
use spool_protocol::SessionId;
use spool_protocol::time::now_ms;
use std::time::Duration;

/// How long an entry stays valid without a refresh.
pub(crate) const ENTRY_LIFETIME: Duration = Duration::from_secs(30);

pub(crate) async fn set(
    conn: &mut ConnectionManager,
    seal: &ClusterKey,
    session: &SessionId,
    node: &str,
    watchers: Watchers,
) -> redis::RedisResult<()> {
    let key = Keys::of(session).watch;
    if watchers == Watchers::default() {
        return conn.hdel(&key, node).await;
    }
    let expires = now_ms() + ENTRY_LIFETIME.as_millis() as i64;
    let entry = format!("{} {} {expires}", watchers.streams, watchers.interactive);
    let entry = seal.seal(&scope(&key, node), entry.as_bytes());
    redis::pipe()
        .atomic()
        .hset(&key, node, entry.as_ref())
        .ignore()
        .pexpire(&key, (ENTRY_LIFETIME * 2).as_millis() as i64)
        .ignore()
        .query_async(conn)
        .await
}

/// Every node's live entry, by node.
pub(crate) async fn all(
    conn: &mut ConnectionManager,
    seal: &ClusterKey,
    session: &SessionId,
) -> redis::RedisResult<Vec<(String, Watchers)>> {
    let key = Keys::of(session).watch;
    let entries: Vec<(String, Vec<u8>)> = conn.hgetall(&key).await?;
    let now = now_ms();
    Ok(entries
        .into_iter()
        .filter_map(|(node, entry)| {
            let entry = seal.open(&scope(&key, node.as_str()), &Bytes::from(entry))?;
            Some((node, parse(std::str::from_utf8(&entry).ok()?, now)?))
        })
        .collect())
}

/// What an entry is sealed for: its hash and its node, so it counts only there.
fn scope(key: &str, node: &str) -> String {
    format!("{key}\n{node}")
}

/// An entry's counts, if it has not expired (and reads as one).
fn parse(entry: &str, now: i64) -> Option<Watchers> {
    let mut parts = entry.split(' ').map(str::parse::<i64>);
    let (streams, interactive, expires) = (parts.next()?.ok()?, parts.next()?.ok()?, parts.next()?.ok()?);
    (expires > now).then_some(Watchers { streams: streams.max(0) as u64, interactive: interactive.max(0) as u64 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expired_and_malformed_entries_count_for_nothing() {
        let live = Watchers { streams: 3, interactive: 1 };
        assert_eq!(parse("3 1 2000", 1000), Some(live));
        assert_eq!(parse("3 1 1000", 1000), None, "expired");
        assert_eq!(parse("3 1", 0), None);
        assert_eq!(parse("x 1 2000", 0), None);
    }
}
