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
//! already says. Clustered, a node also looks again every [`PRESENCE_REFRESH`]: another
//! node's views change without this node hearing of it, and two nodes announcing at
//! once may each have read the other's old entry.

use super::{SessionEvents, Shared};
use crate::framebus::{FrameBus, Watchers};
use spool_protocol::SessionId;
use spool_protocol::frame::FrameBody;
use std::sync::{Arc, Weak};
use std::time::Duration;

/// How often a clustered node compares the session's presence on every node with what
/// its state says.
pub const PRESENCE_REFRESH: Duration = Duration::from_secs(15);

impl SessionEvents {
    /// This node's views of the session, counted.
    pub fn watchers_here(&self) -> Watchers {
        self.shared.watchers()
    }

    /// Announces the session's presence from now on: a `session.presence` frame `settle`
    /// after the views change, when the sum over this node and (clustered) every other
    /// node the bus knows of differs from the state's. `bus` is the frame bus and this
    /// node's name in it.
    pub(crate) fn announce_presence(&self, settle: Duration, bus: Option<(Arc<dyn FrameBus>, String)>) {
        let views = self.shared.views.subscribe();
        tokio::spawn(announce_task(Arc::downgrade(&self.shared), views, settle, bus));
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

async fn announce_task(
    weak: Weak<Shared>,
    mut views: tokio::sync::watch::Receiver<u64>,
    settle: Duration,
    bus: Option<(Arc<dyn FrameBus>, String)>,
) {
    let mut refresh = tokio::time::interval(PRESENCE_REFRESH);
    refresh.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    refresh.tick().await;
    loop {
        tokio::select! {
            changed = views.changed() => match changed {
                Ok(()) => tokio::time::sleep(settle).await,
                // The stream is gone.
                Err(_) => break,
            },
            _ = refresh.tick(), if bus.is_some() => {}
        }
        // What changed while settling is in the count taken now.
        views.borrow_and_update();
        let Some(shared) = weak.upgrade() else { break };
        let (session, here) = (shared.session_id.clone(), shared.watchers());
        drop(shared);
        let all = match &bus {
            Some((bus, node)) => here + watchers_elsewhere(&**bus, node, &session).await,
            None => here,
        };
        let Some(shared) = weak.upgrade() else { break };
        if shared.lock().closed.is_some() {
            break;
        }
        let presence = all.presence();
        SessionEvents { shared }.publish(|state| {
            (state.presence != presence).then(|| {
                state.presence = presence.clone();
                FrameBody::Presence { presence }
            })
        });
    }
}
