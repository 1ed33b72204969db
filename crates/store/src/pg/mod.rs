//! The PostgreSQL store, for several nodes sharing one database: [`PgStore`] is a cheap
//! `Clone` handle around a sqlx pool. Its SQL is the record modules shared with SQLite
//! (`src/sql/`, compiled in here against [`dialect`]), and
//! [`delegate`](crate::delegate) maps the trait onto them.
//!
//! Concurrency is PostgreSQL's default READ COMMITTED. The writes whose atomicity the
//! product depends on are each one statement that decides by itself: a conditional
//! `UPDATE … WHERE status = 'pending'` (a second updater waits for the first, then
//! re-checks the condition against the committed row and finds nothing to change),
//! `INSERT … ON CONFLICT DO NOTHING` (exactly one inserter of a key succeeds), and an
//! upsert with a `WHERE` for leases. The schema is one migration under
//! `migrations-pg/`, applied on connect under sqlx's advisory lock, so nodes that
//! start together do not migrate twice.

mod dialect;
// The record modules, shared with SQLite and compiled here against `dialect` (see
// `src/sql/mod.rs` for why they are included rather than generic).
#[allow(clippy::duplicate_mod)]
#[path = "../sql/mod.rs"]
mod sql;

use sql::{
    approvals, auth, branches, drafts, idempotency, leases, memory, messages, projects, queue, reverts, run_frames,
    runs, search, sessions, step_snapshots, todos, tokens, tool_sources, users,
};
// Attachments: who holds which stored file (issue 42).
use sql::attachments;
// Web Push's subscriptions and the nodes' shared keys (issue 41).
use sql::push;
// The outbox: events written with their changes, and their deliveries (issue 41).
use sql::outbox;

use crate::error::db_error;
use spool_engine::StoreError;
use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};
use std::str::FromStr;
use std::time::Duration;

/// How long the first connection may take: a server that drops packets instead of
/// refusing them would otherwise hold the start-up for the system's TCP timeout.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a query waits for a free connection (or for a new one to a server that
/// went away) before it fails.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections per node. Queries are short; a node rarely has more than a few in
/// flight, and many nodes share the server's `max_connections` (100 by default).
const POOL_SIZE: u32 = 8;

/// The PostgreSQL implementation of [`Store`](spool_engine::Store).
#[derive(Clone, Debug)]
pub struct PgStore {
    pub(crate) pool: PgPool,
    /// The lease fence this handle's run writes are held to (see
    /// `spool_engine::store::Nodes::fenced`); `None` on the store itself.
    pub(crate) fence: Option<spool_engine::LeaseFence>,
}

impl PgStore {
    /// Connects to the database at `url` (`postgres://` or `postgresql://`) and brings
    /// its schema up to date. Errors name the server but never the password.
    ///
    /// The migrations run on one connection of their own, made before the pool: a
    /// server that cannot be reached fails that one attempt at once, where a pool
    /// would keep retrying until its acquire timeout.
    pub async fn connect(url: &str) -> Result<PgStore, StoreError> {
        let options = PgConnectOptions::from_str(url)
            .map_err(|e| StoreError::Backend(format!("invalid PostgreSQL URL: {e}")))?
            .application_name("spool");
        let server = format!(
            "{}:{}/{}",
            options.get_host(),
            options.get_port(),
            options.get_database().unwrap_or("(default database)")
        );
        let cannot = |why: String| StoreError::Backend(format!("cannot connect to PostgreSQL at {server}: {why}"));
        let mut conn = tokio::time::timeout(CONNECT_TIMEOUT, PgConnection::connect_with(&options))
            .await
            .map_err(|_| cannot(format!("no answer within {CONNECT_TIMEOUT:?}")))?
            .map_err(|e| cannot(e.to_string()))?;
        // `run_direct` is `run` without its `Acquire` bound, which over `&mut PgConnection`
        // makes the future fail `Send` checks where a caller spawns it (sqlx's own
        // comment on the method names this).
        sqlx::migrate!("./migrations-pg")
            .run_direct(&mut conn)
            .await
            .map_err(|e| StoreError::Backend(format!("migrating the database at {server}: {e}")))?;
        conn.close().await.map_err(db_error)?;
        let pool =
            PgPoolOptions::new().max_connections(POOL_SIZE).acquire_timeout(ACQUIRE_TIMEOUT).connect_lazy_with(options);
        Ok(PgStore { pool, fence: None })
    }

    /// Closes every connection, waiting for queries in flight.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// The deployment's cluster key (sealing what nodes write to Redis), stored once:
    /// the first caller's `fresh` secret is kept, and every caller, then and later, gets
    /// the one kept. One statement each way, so nodes starting together agree.
    pub async fn cluster_key(&self, fresh: &[u8]) -> Result<Vec<u8>, StoreError> {
        sqlx::query("INSERT INTO cluster_key (id, secret, created_at) VALUES (1, $1, $2) ON CONFLICT (id) DO NOTHING")
            .bind(fresh)
            .bind(spool_protocol::time::now_ms())
            .execute(&self.pool)
            .await
            .map_err(db_error)?;
        let (secret,): (Vec<u8>,) =
            sqlx::query_as("SELECT secret FROM cluster_key WHERE id = 1").fetch_one(&self.pool).await.map_err(db_error)?;
        Ok(secret)
    }
}

crate::delegate::impl_store!(PgStore);
