//! Counting what each user holds open at once — session streams, searches — against a
//! per-user limit. The count is taken with [`PerUser::take`] and given back when the
//! [`Counted`] is dropped, on every path (done, refused further on, the request dropped
//! while it waited), so no caller has to remember to give it back.

use spool_protocol::UserId;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// Each user's count. Cheap to clone: clones share the counts.
#[derive(Clone, Default)]
pub(crate) struct PerUser {
    // A std mutex: nothing awaits while it is held.
    counts: Arc<Mutex<HashMap<UserId, usize>>>,
}

/// One thing counted against its user; the count goes down when it is dropped.
pub(crate) struct Counted {
    counts: PerUser,
    user: UserId,
}

impl PerUser {
    fn lock(&self) -> MutexGuard<'_, HashMap<UserId, usize>> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts one more for `user`; `None` when they hold `limit` already.
    pub fn take(&self, user: &UserId, limit: usize) -> Option<Counted> {
        let mut counts = self.lock();
        let held = counts.entry(user.clone()).or_insert(0);
        if *held >= limit {
            return None;
        }
        *held += 1;
        Some(Counted { counts: self.clone(), user: user.clone() })
    }

    /// What `user` holds now.
    #[cfg(test)]
    pub fn held(&self, user: &UserId) -> usize {
        self.lock().get(user).copied().unwrap_or(0)
    }

    /// What all users hold together now.
    #[cfg(test)]
    pub fn total(&self) -> usize {
        self.lock().values().sum()
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        let mut counts = self.counts.lock();
        if let Some(n) = counts.get_mut(&self.user) {
            *n -= 1;
            // An entry per user who holds something, not per user ever seen.
            if *n == 0 {
                counts.remove(&self.user);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_is_given_back_when_dropped_and_the_limit_is_per_user() {
        let counts = PerUser::default();
        let (alice, bob) = (UserId::new(), UserId::new());
        let first = counts.take(&alice, 2).expect("first");
        let _second = counts.take(&alice, 2).expect("second");
        assert!(counts.take(&alice, 2).is_none(), "a third is over alice's limit");
        let _bobs = counts.take(&bob, 2).expect("bob counts on his own");
        drop(first);
        assert_eq!(counts.held(&alice), 1);
        let _again = counts.take(&alice, 2).expect("a count came back");
        assert_eq!(counts.total(), 3);
    }
}
