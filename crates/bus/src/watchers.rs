//! Who watches a session, across nodes: each node records in one hash per session how
//! many clients it has on the session's stream (and how many of them are interactive
//! views), so the node running the session can tell "nobody anywhere" (a prompt's
//! `onDisconnect: "cancel"`) and "no person who could answer" (`--approval-policy
//! deny`) as a single node does.
//!
//! An entry is `<streams> <interactive> <visible> <kinds> <expires-at ms>` under the
//! node's id, `<kinds>` the streams by kind of client (`web=2,ag-ui=1`, or `-` for none;
//! see `spool_protocol::presence`). The older `<streams> <interactive> <expires-at ms>`
//! (a node of an earlier version, during a rolling upgrade) still reads: its interactive
//! views count as visible and its streams as `other` clients. A node
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
use spool_protocol::presence::ClientKind;
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
    let entry = format!("{} {} {} {} {expires}", watchers.streams, watchers.interactive, watchers.visible, kinds(&watchers));
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

/// The streams by kind, as an entry writes them: `web=2,ag-ui=1`, `-` for none.
fn kinds(watchers: &Watchers) -> String {
    let kinds: Vec<String> = ClientKind::ALL
        .into_iter()
        .zip(watchers.kinds)
        .filter(|(_, n)| *n > 0)
        .map(|(kind, n)| format!("{}={n}", kind.as_str()))
        .collect();
    match kinds.is_empty() {
        true => "-".to_owned(),
        false => kinds.join(","),
    }
}

/// An entry's counts, if it has not expired (and reads as one), in either form.
fn parse(entry: &str, now: i64) -> Option<Watchers> {
    let parts: Vec<&str> = entry.split(' ').collect();
    let count = |part: &str| part.parse::<i64>().ok().map(|n| n.max(0) as u64);
    let mut watchers = Watchers::default();
    let expires = match parts[..] {
        [streams, interactive, expires] => {
            watchers.streams = count(streams)?;
            watchers.interactive = count(interactive)?;
            // A node that does not know of visibility: its answerers may be looking.
            watchers.visible = watchers.interactive;
            watchers.kinds[ClientKind::Other.index()] = watchers.streams;
            expires
        }
        [streams, interactive, visible, kinds, expires] => {
            watchers.streams = count(streams)?;
            watchers.interactive = count(interactive)?;
            watchers.visible = count(visible)?;
            for kind in kinds.split(',').filter(|k| *k != "-") {
                let (name, n) = kind.split_once('=')?;
                // A kind a newer node knows of and this one does not.
                let at = ClientKind::parse(name).unwrap_or(ClientKind::Other).index();
                watchers.kinds[at] += count(n)?;
            }
            expires
        }
        _ => return None,
    };
    (expires.parse::<i64>().ok()? > now).then_some(watchers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expired_and_malformed_entries_count_for_nothing() {
        let mut live = Watchers { streams: 3, interactive: 1, visible: 0, ..Watchers::default() };
        live.kinds[ClientKind::Web.index()] = 1;
        live.kinds[ClientKind::AgUi.index()] = 2;
        assert_eq!(parse("3 1 0 web=1,ag-ui=2 2000", 1000), Some(live));
        assert_eq!(parse("3 1 0 web=1,ag-ui=2 1000", 1000), None, "expired");
        assert_eq!(parse("3 1", 0), None);
        assert_eq!(parse("x 1 2000", 0), None);
        assert_eq!(parse("3 1 0 web 2000", 0), None);
    }

    #[test]
    fn an_entry_reads_back_as_written_and_the_old_form_still_reads() {
        let mut written = Watchers { streams: 4, interactive: 2, visible: 1, ..Watchers::default() };
        written.kinds[ClientKind::Web.index()] = 2;
        written.kinds[ClientKind::Cli.index()] = 2;
        assert_eq!(kinds(&written), "web=2,cli=2");
        assert_eq!(parse(&format!("4 2 1 {} 2000", kinds(&written)), 1000), Some(written));
        assert_eq!(kinds(&Watchers::default()), "-");
        assert_eq!(parse("0 0 0 - 2000", 1000), Some(Watchers::default()));

        let old = parse("3 1 2000", 1000).expect("the old form");
        assert_eq!((old.streams, old.interactive, old.visible), (3, 1, 1), "its answerers may be looking");
        assert_eq!(old.presence().clients, [(ClientKind::Other, 3)].into_iter().collect());
        let newer = parse("1 0 0 vr=1 2000", 1000).expect("a kind from a newer node");
        assert_eq!(newer.kinds[ClientKind::Other.index()], 1);
    }
}
