//! The git poller: every few seconds (5 by default) it reads the git state of each
//! loaded session's project — branch, HEAD commit, diff against HEAD — and when it
//! changed since the last reading, publishes a `session.git` frame on the session's
//! stream, which the WebSocket hub maps to `channel.updated` and OpenCode's `/event` to
//! `session.diff` (seed 002's BranchPoller).
//!
//! * **Priming.** A session's first reading after it is loaded is only remembered: a
//!   change is a difference between two readings, and a session that was just loaded
//!   has had none. (The reading shows in `GET /api/sessions/:id` as `git`.)
//! * **Quiet.** A project in no git repository reads as `None` and is skipped without
//!   a word; a repository that cannot be read is logged once (until it reads again),
//!   not at every tick.
//! * **Off the async threads, bounded.** Reading walks the work tree, so it runs on
//!   tokio's blocking pool, at most [`CONCURRENT_READS`] projects at a time, each
//!   project once per tick however many sessions share it. A project whose reading is
//!   still going when the next tick comes is not read again until it has finished: a
//!   huge work tree delays only its own sessions' updates, never another project's.
//!   The reader itself ([`GitProbe`], implemented with libgit2 in `spool-tools`) caps
//!   the diff it computes per reading.
//!
//! The engine defines the reader as a trait (like `Store` and `Tool`) so it imports no
//! git library and tests can script readings. With several nodes, each polls the
//! sessions it has loaded: two nodes that both hold one session may each announce the
//! same change once.

use crate::registry::Registry;
use spool_protocol::frame::FrameBody;
use spool_protocol::git::GitState;
use spool_protocol::{SessionId, StreamId};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::task::JoinSet;

/// Projects read at the same time, on the blocking pool.
pub const CONCURRENT_READS: usize = 4;

/// Reads a project's git state. Called on a blocking thread; it may take a while, but
/// should bound its own work (see the module docs).
pub trait GitProbe: Send + Sync + 'static {
    /// The git state of the repository `root` lies in; `Ok(None)` when it lies in none.
    /// An `Err` says why an existing repository could not be read, or why `root` is no
    /// longer the directory registered as `root_id` (see `ToolContext::root_id`): the
    /// poller reads only the project's own directory.
    fn read(&self, root: &Path, root_id: Option<spool_protocol::DirIdentity>) -> Result<Option<GitState>, String>;
}

/// How often to poll, and with what (the engine's `EngineConfig::git`).
#[derive(Clone)]
pub struct GitPolling {
    pub every: Duration,
    pub probe: Arc<dyn GitProbe>,
}

impl std::fmt::Debug for GitPolling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GitPolling").field("every", &self.every).finish_non_exhaustive()
    }
}

/// The latest reading of each loaded session, for `GET /api/sessions/:id` and for
/// telling a change. A std mutex: held only to look up or replace, never across an
/// await.
#[derive(Default)]
pub(crate) struct Readings {
    by_session: Mutex<HashMap<SessionId, Reading>>,
}

struct Reading {
    /// The session's stream when it was read: a session unloaded and loaded again has a
    /// new stream, and its first reading primes again.
    stream: StreamId,
    state: Option<GitState>,
}

impl Readings {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SessionId, Reading>> {
        self.by_session.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The latest reading of the session as loaded on `stream`.
    pub fn get(&self, session: &SessionId, stream: &StreamId) -> Option<GitState> {
        self.lock().get(session).filter(|r| &r.stream == stream).and_then(|r| r.state.clone())
    }

    /// Records a reading; returns it when it is a change to announce (the session had
    /// a reading on this stream, a different one, and the new one is a repository's).
    fn record(&self, session: &SessionId, stream: StreamId, state: Option<GitState>) -> Option<GitState> {
        let mut readings = self.lock();
        let changed = match readings.get(session) {
            Some(last) if last.stream == stream => last.state != state,
            // Primes: nothing to compare with.
            _ => false,
        };
        readings.insert(session.clone(), Reading { stream, state: state.clone() });
        state.filter(|_| changed)
    }

    /// Forgets the sessions that are not loaded (on these streams) any more.
    fn retain(&self, loaded: &HashMap<SessionId, StreamId>) {
        self.lock().retain(|id, r| loaded.get(id) == Some(&r.stream));
    }
}

/// Starts the poller over the loaded sessions and their readings. It holds both weakly,
/// and only the engine holds the readings, so it ends with the engine.
pub(crate) fn spawn(sessions: Weak<Registry>, readings: Weak<Readings>, polling: GitPolling) {
    tokio::spawn(poll(sessions, readings, polling));
}

async fn poll(sessions: Weak<Registry>, readings: Weak<Readings>, polling: GitPolling) {
    let upgrade = || Some((sessions.upgrade()?, readings.upgrade()?));
    let permits = Arc::new(tokio::sync::Semaphore::new(CONCURRENT_READS));
    let mut tick = tokio::time::interval(polling.every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut reads: JoinSet<(PathBuf, Result<Option<GitState>, String>)> = JoinSet::new();
    let mut reading: HashSet<PathBuf> = HashSet::new();
    // Repositories whose failure was logged: logged again only after they read once.
    let mut failing: HashSet<PathBuf> = HashSet::new();
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let Some((sessions, readings)) = upgrade() else { return };
                let loaded = sessions.all();
                let streams = loaded.iter().map(|l| (l.events.session_id().clone(), l.events.stream_id())).collect();
                readings.retain(&streams);
                failing.retain(|root| loaded.iter().any(|l| &l.root == root));
                for (root, root_id) in loaded.iter().map(|l| (l.root.clone(), l.root_id)) {
                    if !reading.insert(root.clone()) {
                        continue;
                    }
                    let (probe, permits) = (polling.probe.clone(), permits.clone());
                    reads.spawn(async move {
                        let _permit = permits.acquire_owned().await.expect("the semaphore is never closed");
                        let at = root.clone();
                        let read = tokio::task::spawn_blocking(move || probe.read(&at, root_id)).await;
                        (root, read.unwrap_or_else(|e| Err(format!("the git reader failed: {e}"))))
                    });
                }
            }
            Some(done) = reads.join_next() => {
                let Ok((root, result)) = done else { continue };
                reading.remove(&root);
                let Some((sessions, readings)) = upgrade() else { return };
                match result {
                    Ok(state) => {
                        failing.remove(&root);
                        announce(&sessions, &readings, &root, state);
                    }
                    Err(error) if failing.insert(root.clone()) => {
                        tracing::warn!(root = %root.display(), %error, "cannot read the project's git state");
                    }
                    Err(error) => tracing::debug!(root = %root.display(), %error, "still cannot read git state"),
                }
            }
        }
    }
}

/// Records a project's reading for each of its loaded sessions and publishes the
/// changes.
fn announce(sessions: &Registry, readings: &Readings, root: &Path, state: Option<GitState>) {
    for loaded in sessions.all().into_iter().filter(|l| l.root == root) {
        let (session, stream) = (loaded.events.session_id(), loaded.events.stream_id());
        if let Some(git) = readings.record(session, stream, state.clone()) {
            loaded.events.publish_body(FrameBody::Git { git });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(branch: &str, additions: u64) -> Option<GitState> {
        Some(GitState { branch: Some(branch.into()), additions, ..GitState::default() })
    }

    #[test]
    fn the_first_reading_primes_and_only_a_different_one_is_announced() {
        let readings = Readings::default();
        let (session, stream) = (SessionId::new(), StreamId::new());
        assert_eq!(readings.record(&session, stream.clone(), reading("main", 1)), None, "primes");
        assert_eq!(readings.get(&session, &stream), reading("main", 1));
        assert_eq!(readings.record(&session, stream.clone(), reading("main", 1)), None, "unchanged");
        assert_eq!(readings.record(&session, stream.clone(), reading("main", 3)), reading("main", 3));
        assert_eq!(readings.record(&session, stream.clone(), None), None, "not a repository: nothing to say");
        assert_eq!(readings.record(&session, stream.clone(), reading("dev", 0)), reading("dev", 0));
        // Loaded again: a new stream, primed again.
        let again = StreamId::new();
        assert_eq!(readings.get(&session, &again), None);
        assert_eq!(readings.record(&session, again.clone(), reading("dev", 9)), None);
        readings.retain(&HashMap::new());
        assert_eq!(readings.get(&session, &again), None, "an unloaded session is forgotten");
    }
}
