//! How many session searches run at once, per user and on the whole node, and for how
//! long each may run.
//!
//! A search is a scan of the user's message text (see the store's `sql/search.rs`),
//! and it holds one of the store's few pooled connections for as long as it runs
//! (SQLite's pool has four). Sixteen parallel searches by one user took every
//! connection, and another user's request waited 4.7 s for one. So:
//!
//! * **Per user:** at most `per_user` searches at once (default 2). One more is refused
//!   at once with 429 `too_many_searches` (and `Retry-After`), not queued: a client
//!   typing into a search box sends a fresh query anyway.
//! * **Per node:** at most `server` searches at once (default 3), fewer than the SQLite
//!   pool's connections, so other requests always find one. A search past it waits
//!   briefly for a slot, then gets 429 `searches_busy`.
//! * **Time:** a search that runs past `time_limit` (default 10 s) ends with 503
//!   `search_timeout`, and the database stops its scan at the same limit (SQLite's
//!   progress handler, PostgreSQL's `statement_timeout`). The slots are held until the
//!   store has really stopped, so the bound counts the database's work, not only the
//!   requests still waiting for it.

use crate::error::EngineError;
use crate::per_user::{Counted, PerUser};
use spool_protocol::UserId;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How long a search waits for one of the node's slots before it is refused.
const NODE_WAIT: Duration = Duration::from_secs(2);

/// The search limits (see the module doc).
#[derive(Clone, Debug)]
pub struct SearchLimits {
    /// Searches one user may have running at once.
    pub per_user: usize,
    /// Searches this node runs at once, for all users together.
    pub server: usize,
    /// How long one search may run.
    pub time_limit: Duration,
    /// For tests: awaited by every search once it holds its slots, before it reads the
    /// store, so a test can keep one user's searches in flight for as long as it wants.
    pub hold: Option<SearchHold>,
}

impl Default for SearchLimits {
    fn default() -> Self {
        Self { per_user: 2, server: 3, time_limit: Duration::from_secs(10), hold: None }
    }
}

/// What a held search waits for.
pub type Held = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A test's hand on searches in flight (see [`SearchLimits::hold`]): given the searching
/// user, the future the search waits for.
#[derive(Clone)]
pub struct SearchHold(pub Arc<dyn Fn(&UserId) -> Held + Send + Sync>);

impl std::fmt::Debug for SearchHold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SearchHold")
    }
}

/// The searches running on this node, per user and in all.
pub(crate) struct SearchSlots {
    node: Arc<Semaphore>,
    per_user: PerUser,
}

/// A running search's place; both counts go down when it is dropped (the user's on
/// every path: refused by the node, the request dropped while waiting, done).
pub(crate) struct SearchSlot {
    _user: Counted,
    _node: OwnedSemaphorePermit,
}

/// The 429 for a user already running their most searches.
pub const TOO_MANY_SEARCHES: &str = "too_many_searches";

impl SearchSlots {
    pub(crate) fn new(limits: &SearchLimits) -> SearchSlots {
        SearchSlots { node: Arc::new(Semaphore::new(limits.server.max(1))), per_user: PerUser::default() }
    }

    /// A slot for one search by `user`: refused at once past the user's limit, after a
    /// short wait past the node's.
    pub(crate) async fn admit(&self, user: &UserId, limits: &SearchLimits) -> Result<SearchSlot, EngineError> {
        let counted = self.per_user.take(user, limits.per_user).ok_or_else(|| EngineError::TooMany {
            code: TOO_MANY_SEARCHES,
            message: format!(
                "you already have {} searches running, the most one user may; wait for one to finish",
                limits.per_user
            ),
        })?;
        match tokio::time::timeout(NODE_WAIT, self.node.clone().acquire_owned()).await {
            Ok(Ok(permit)) => Ok(SearchSlot { _user: counted, _node: permit }),
            _ => Err(EngineError::TooMany {
                code: "searches_busy",
                message: "the server is running as many searches as it allows; try again in a moment".into(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn per_user_then_per_node() {
        let limits = SearchLimits { per_user: 2, server: 3, ..SearchLimits::default() };
        let slots = SearchSlots::new(&limits);
        let (alice, bob) = (UserId::new(), UserId::new());
        let a1 = slots.admit(&alice, &limits).await.expect("first");
        let _a2 = slots.admit(&alice, &limits).await.expect("second");
        let refused = slots.admit(&alice, &limits).await.err().expect("third refused");
        assert_eq!(refused.code(), TOO_MANY_SEARCHES);
        let _b1 = slots.admit(&bob, &limits).await.expect("bob's own");
        drop(a1);
        let _a3 = slots.admit(&alice, &limits).await.expect("a slot came back");
        assert_eq!(slots.per_user.total(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn past_the_node_limit_a_search_waits_briefly_then_is_refused() {
        let limits = SearchLimits { per_user: 5, server: 1, ..SearchLimits::default() };
        let slots = SearchSlots::new(&limits);
        let (alice, bob) = (UserId::new(), UserId::new());
        let held = slots.admit(&alice, &limits).await.expect("the node's one slot");
        let refused = slots.admit(&bob, &limits).await.err().expect("no slot within the wait");
        assert_eq!(refused.code(), "searches_busy");
        assert_eq!(slots.per_user.held(&bob), 0, "bob's count was given back");
        // A slot freed during the wait is taken.
        let waiting = slots.admit(&bob, &limits);
        drop(held);
        waiting.await.expect("the freed slot");
    }
}
