//! The sessions loaded on this node: an owned service behind the engine. Everything
//! that looks sessions up, loads, unloads or walks them goes through here, so the rules
//! that need the map's lock (a session handed out is never unloaded the same moment; a
//! view nobody uses may be dropped) are stated once.
//!
//! A std mutex: held only to look up, insert or walk, never across an await.

use crate::Clock;
use crate::events::Ended;
use crate::session::{ActiveHandle, Loaded};
use spool_protocol::SessionId;
use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

pub(crate) struct Registry {
    sessions: Mutex<HashMap<SessionId, Arc<Loaded>>>,
    /// The loads in progress, a gate per session (see [`Registry::loading`]).
    loading: Mutex<HashMap<SessionId, Weak<tokio::sync::Mutex<()>>>>,
    /// What a session's last use is stamped with: the janitor's clock.
    clock: Clock,
}

/// Whether a view no one uses may be dropped when it is looked up (see [`Registry::touch`]).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unused {
    Keep,
    /// Another node may have written to the session unseen (a shared store without a
    /// frame bus): a view nobody here uses is read again from the store.
    Reload,
}

impl Registry {
    pub fn new(clock: Clock) -> Self {
        Registry { sessions: Mutex::default(), loading: Mutex::default(), clock }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<SessionId, Arc<Loaded>>> {
        // A panic while holding the lock leaves plain data behind; keep serving it.
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn get(&self, id: &SessionId) -> Option<Arc<Loaded>> {
        self.lock().get(id).cloned()
    }

    /// The loaded session `id`, marked used now — under the lock the janitor holds while
    /// it decides ([`unload_idle`](Self::unload_idle)), so a session handed out here is
    /// not unloaded the same moment. With [`Unused::Reload`] a view that no stream, run
    /// or request holds is dropped instead, and `None` says to load it again.
    pub fn touch(&self, id: &SessionId, unused: Unused) -> Option<Arc<Loaded>> {
        let mut sessions = self.lock();
        if unused == Unused::Reload
            && let Some(l) = sessions.get(id)
            && Arc::strong_count(l) == 1
            && l.events.subscriber_count() == 0
            && l.active().is_none()
        {
            l.events.close(Ended::Unloaded);
            sessions.remove(id);
        }
        let found = sessions.get(id).cloned();
        if let Some(l) = &found {
            l.touched.store(self.clock.now_ms(), Relaxed);
        }
        found
    }

    /// The gate a load of session `id` holds while it reads the store: a second load
    /// waits for the first and then finds the session loaded. Without it a thousand
    /// streams opening at once on a node that had not loaded their session yet (a new
    /// node behind a load balancer, or one taking a lost node's clients; issue 43) each
    /// read the session from the store and, in bus mode, each asked the node running it
    /// for a snapshot, queued on the store's few connections.
    pub fn loading(&self, id: &SessionId) -> Arc<tokio::sync::Mutex<()>> {
        let mut loading = self.loading.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(gate) = loading.get(id).and_then(Weak::upgrade) {
            return gate;
        }
        // Gates go when their last load is done; the map holds the loads in progress.
        loading.retain(|_, gate| gate.strong_count() > 0);
        let gate = Arc::new(tokio::sync::Mutex::new(()));
        loading.insert(id.clone(), Arc::downgrade(&gate));
        gate
    }

    /// Adds a freshly loaded session; of two concurrent loads the first insert wins and
    /// both use it.
    pub fn insert(&self, id: &SessionId, fresh: Arc<Loaded>) -> Arc<Loaded> {
        self.lock().entry(id.clone()).or_insert(fresh).clone()
    }

    pub fn remove(&self, id: &SessionId) {
        self.lock().remove(id);
    }

    /// Every loaded session, as it is now.
    pub fn all(&self) -> Vec<Arc<Loaded>> {
        self.lock().values().cloned().collect()
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// The handles of the runs executing here now (not those parked at an approval).
    pub fn running(&self) -> Vec<ActiveHandle> {
        self.lock().values().filter_map(|l| l.active()).filter(|a| a.interrupted.is_none()).collect()
    }

    /// Whether this node is executing a run of the session right now.
    pub fn runs_here(&self, id: &SessionId) -> bool {
        self.lock().get(id).and_then(|l| l.active()).is_some_and(|a| a.interrupted.is_none())
    }

    /// Has the loaded session `id` publish a full snapshot frame (for a node that lost
    /// track of it); `false` when it is not loaded here.
    pub fn resync(&self, id: &SessionId) -> bool {
        self.get(id).map(|loaded| loaded.events.resync()).is_some()
    }

    /// Drops the view of a session with no active run here (its streams end, and the
    /// next reader loads it from the store).
    pub fn forget_if_idle(&self, id: &SessionId) {
        let mut sessions = self.lock();
        if let Some(loaded) = sessions.get(id)
            && loaded.active().is_none()
        {
            loaded.events.close(Ended::Unloaded);
            sessions.remove(id);
        }
    }

    /// Unloads the sessions last touched at `cutoff` or before that nobody watches or
    /// runs and no request is in the middle of (holding the control lock). Returns how
    /// many.
    pub fn unload_idle(&self, cutoff: i64) -> usize {
        let mut sessions = self.lock();
        let before = sessions.len();
        sessions.retain(|_, l| {
            let idle = l.touched.load(Relaxed) <= cutoff
                && l.events.subscriber_count() == 0
                && l.active().is_none()
                && l.control.try_lock().is_ok();
            if idle {
                l.events.close(Ended::Unloaded);
            }
            !idle
        });
        before - sessions.len()
    }
}
