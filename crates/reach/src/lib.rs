//! What reaches people and systems outside a session (issue 41).
//!
//! The store writes an *event* in the same transaction as the change it tells of
//! (a session created, an approval requested or resolved, a question asked, a run
//! settled). Every node runs a [`dispatch::Dispatcher`] that fans each event out to its
//! *targets* (one delivery row per target, `webhook:<name>` or `push:<subscription>`),
//! claims due deliveries under a lease and hands each to the [`dispatch::Channel`] that
//! owns its target's prefix. A delivery is made at least once, under the same id on
//! every try.

pub mod dispatch;
pub mod push;
pub mod token;
pub mod vapid;
pub mod webhook;
