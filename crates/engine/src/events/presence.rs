//! Presence: who is on a session right now, on every node (`spool_protocol::presence`).
//!
//! Each subscription says who holds it ([`Viewer`](super::Viewer)): the kind of client
//! and whether a person there can answer approvals; the web UI's socket also says when
//! its page is hidden ([`Subscription::set_visible`](super::Subscription::set_visible)).
//! This node's counts are [`SessionEvents::watchers_here`]; in bus mode every node
//! records its own in the bus (`replication.rs`, `report_task`), and the sum of them all
//! is the session's presence.
//!
//! A change is announced as a `session.presence` frame once the views have settled for
//! a moment (a page reload drops and reopens its socket: one frame, or none when the
//! counts end where they were), and only when the sum differs from what the state
//! already says.
//!
//! Clustered, presence is bounded per session, not per node and change: every
//! announcement goes to all of the session's subscribers on every node, so a burst of
//! joins on seven nodes announced by each node after each of its own changes was most
//! of the frames a cluster delivered, and the reads of every node's entry behind them
//! timed Redis out (BENCHMARKS.md, "across nodes"). So one node announces: the
//! *announcer*, the node with the smallest name among those with views of the session
//! (its live entry in the bus; this node by its own counts, which its entry may not show
//! yet). Each node learns whether it is the announcer from each read of the entries,
//! and reads at most once every [`PRESENCE_GAP`]: after its own views change and
//! settle, and otherwise the announcer every [`PRESENCE_GAP`] (another node's views
//! change without this node hearing of it: they reach the clients within a gap and the
//! other node's write) and every other node every [`PRESENCE_REFRESH`] (to learn that
//! it has become the announcer), or every gap while the sum it reads keeps moving.
//! Announcements of a session are therefore a gap apart.
//! When entries are briefly stale two nodes may each believe they announce; the state's
//! equality check drops what is equal, and the next read settles it. The announcer that
//! loses its last view announces that once more (nobody else may know yet); a read that
//! finds nobody anywhere announces it too, from any node.

use super::{SessionEvents, Shared};
use crate::framebus::{FrameBus, Watchers};
use spool_protocol::SessionId;
use spool_protocol::frame::FrameBody;
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::time::Instant;

/// How often a clustered node that does not announce a session's presence looks at
/// every node's entry, to learn whether it has become the announcer.
pub const PRESENCE_REFRESH: Duration = Duration::from_secs(15);

/// Clustered, the least time between two reads of a session's entries by one node, and
/// so between two announcements of its presence; also how often the announcer looks.
pub const PRESENCE_GAP: Duration = Duration::from_secs(2);

impl SessionEvents {
    /// This node's views of the session, counted.
    pub fn watchers_here(&self) -> Watchers {
        self.shared.watchers()
    }

    /// Announces the session's presence from now on: a `session.presence` frame `settle`
    /// after the views change, when the sum over this node and (clustered) every other
    /// node the bus knows of differs from the state's. `bus` is the frame bus and this
    /// node's name in it; clustered, only one node announces (see the module's comment).
    pub(crate) fn announce_presence(&self, settle: Duration, bus: Option<(Arc<dyn FrameBus>, String)>) {
        let views = self.shared.views.subscribe();
        let weak = Arc::downgrade(&self.shared);
        match bus {
            None => tokio::spawn(announce_alone(weak, views, settle)),
            Some((bus, node)) => tokio::spawn(announce_clustered(weak, views, settle, bus, node)),
        };
    }
}

/// The views other nodes have of `session`, as the bus records them (none when it
/// cannot say: then only this node's views count, as a node alone).
pub(crate) async fn watchers_elsewhere(bus: &dyn FrameBus, node: &str, session: &SessionId) -> Watchers {
    match bus.watchers(session).await {
        Ok(entries) => {
            entries.into_iter().filter(|(other, _)| other != node).fold(Watchers::default(), |sum, (_, w)| sum + w)
        }
        Err(error) => {
            tracing::warn!(%session, %error, "cannot read the session's watchers on other nodes");
            Watchers::default()
        }
    }
}

/// A node alone: every settled change of its views is announced.
async fn announce_alone(weak: Weak<Shared>, mut views: tokio::sync::watch::Receiver<u64>, settle: Duration) {
    while views.changed().await.is_ok() {
        tokio::time::sleep(settle).await;
        // What changed while settling is in the count taken now.
        views.borrow_and_update();
        let Some(shared) = weak.upgrade() else { break };
        let here = shared.watchers();
        if !announce(shared, here) {
            break;
        }
    }
}

/// A node of a cluster: reads every node's entry at most once a [`PRESENCE_GAP`], and
/// announces only when it is the announcer.
async fn announce_clustered(
    weak: Weak<Shared>,
    mut views: tokio::sync::watch::Receiver<u64>,
    settle: Duration,
    bus: Arc<dyn FrameBus>,
    node: String,
) {
    let mut last_read: Option<Instant> = None;
    let mut announcer = false;
    let mut last_sum: Option<Watchers> = None;
    let mut next_look = Instant::now() + PRESENCE_REFRESH;
    loop {
        tokio::select! {
            changed = views.changed() => match changed {
                // Settled, and no sooner than a gap after the last read: the changes of
                // a burst in between are in the count taken then.
                Ok(()) => {
                    let settled = Instant::now() + settle;
                    tokio::time::sleep_until(last_read.map_or(settled, |at| settled.max(at + PRESENCE_GAP))).await;
                }
                // The stream is gone.
                Err(_) => break,
            },
            () = tokio::time::sleep_until(next_look) => {}
        }
        views.borrow_and_update();
        let Some(shared) = weak.upgrade() else { break };
        if shared.lock().closed.is_some() {
            break;
        }
        let (session, here) = (shared.session_id.clone(), shared.watchers());
        drop(shared);
        let entries = bus.watchers(&session).await;
        last_read = Some(Instant::now());
        let entries = match entries {
            Ok(entries) => entries,
            Err(error) => {
                // Announcing this node's counts alone would tell every client a wrong
                // sum; the state keeps the last one until a read succeeds.
                tracing::warn!(%session, %error, "cannot read the session's watchers on other nodes");
                next_look = Instant::now() + PRESENCE_GAP;
                continue;
            }
        };
        let others: Vec<(String, Watchers)> =
            entries.into_iter().filter(|(other, w)| *other != node && w.streams > 0).collect();
        let first_other = others.iter().map(|(other, _)| other.as_str()).min();
        let was_announcer = announcer;
        announcer = match first_other {
            // Nobody elsewhere: this node's views are all of them, or there are none.
            None => true,
            Some(first) => here.streams > 0 && node.as_str() < first,
        };
        let all = others.iter().fold(here, |sum, (_, w)| sum + *w);
        // While the sum moves (a burst, nodes leaving: their entries are cleared a
        // moment after their views close), look again a gap later, whichever node
        // announces: a node whose views closed may be the announcer once the others'
        // entries are gone.
        let moving = last_sum.replace(all) != Some(all);
        // A node that announces nobody anywhere needs no gap's look: a view of its own
        // wakes it.
        let looking = (announcer && here.streams > 0) || moving;
        next_look = Instant::now() + if looking { PRESENCE_GAP } else { PRESENCE_REFRESH };
        // The announcer that has just lost its last view tells the others' count once:
        // the node that takes over hears of it only at its next read.
        let handing_over = was_announcer && here.streams == 0;
        if !announcer && !handing_over {
            continue;
        }
        let Some(shared) = weak.upgrade() else { break };
        if !announce(shared, all) {
            break;
        }
    }
}

/// Folds `watchers` into the state as its presence, with a frame when that changes it.
/// False when the session is closed: nothing is announced any more.
fn announce(shared: Arc<Shared>, watchers: Watchers) -> bool {
    if shared.lock().closed.is_some() {
        return false;
    }
    let presence = watchers.presence();
    SessionEvents { shared }.publish(|state| {
        (state.presence != presence).then(|| {
            state.presence = presence.clone();
            FrameBody::Presence { presence }
        })
    });
    true
}
