//! The SQLite store: [`SqliteStore`] is a cheap `Clone` handle around a sqlx pool. Its
//! SQL is the record modules shared with PostgreSQL (`src/sql/`, compiled in here
//! against [`dialect`]), and [`delegate`](crate::delegate) maps the trait onto them.
//!
//! The connection settings are chosen for a server with one writer process and many
//! concurrent readers: WAL so reads never block on the writer, `synchronous=NORMAL`
//! (durable across process crashes; in WAL mode only a power loss can drop the last
//! commits), a busy timeout so two writers queue instead of failing, and foreign keys
//! on, which SQLite leaves off by default and the cascading deletes depend on.
//!
//! The WAL stays bounded. SQLite checkpoints it into the database every 1000 pages
//! (`wal_autocheckpoint`), but it can only start writing the WAL from the top again when
//! no reader still uses its old pages, and with a steady stream of readers and writers
//! that moment may never come: the file then grows without end (the review saw 33.7 GB
//! in six minutes of long answers). So `journal_size_limit` cuts the file back to
//! [`WAL_LIMIT`] whenever it is reset, and a task checks its size every
//! [`WAL_CHECK_EVERY`] and, past the limit, runs `PRAGMA wal_checkpoint(TRUNCATE)`, which
//! waits (up to the busy timeout) for readers to move on, then empties it.
//!
//! The file holds token hashes and every conversation, so only its owner may read it:
//! it is created `0600` before SQLite opens it (SQLite gives the `-wal` and `-shm`
//! files it creates the database file's mode), and an existing one is tightened.

mod dialect;
// The record modules, shared with PostgreSQL and compiled here against `dialect` (see
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
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous};
use std::path::Path;
use std::time::Duration;

/// How long a connection waits for another writer's lock before giving up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Connections in a file database's pool. SQLite serialises writers anyway, so more
/// connections only add concurrent readers; a few are plenty for one server.
const FILE_POOL_SIZE: u32 = 4;

/// The WAL size past which it is checkpointed and truncated (see the module doc).
const WAL_LIMIT: u64 = 64 << 20;
/// How often the WAL's size is looked at.
const WAL_CHECK_EVERY: Duration = Duration::from_secs(10);

/// The SQLite implementation of [`Store`](spool_engine::Store).
#[derive(Clone, Debug)]
pub struct SqliteStore {
    pub(crate) pool: SqlitePool,
    /// The lease fence this handle's run writes are held to (see
    /// `spool_engine::store::Nodes::fenced`); `None` on the store itself.
    pub(crate) fence: Option<spool_engine::LeaseFence>,
}

impl SqliteStore {
    /// Opens (creating if missing, with its parent directory) the database file at
    /// `path` and brings its schema up to date.
    pub async fn open(path: &Path) -> Result<SqliteStore, StoreError> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(parent)
                .map_err(|e| StoreError::Backend(format!("cannot create {}: {e}", parent.display())))?;
        }
        private_files(path).map_err(|e| StoreError::Backend(format!("cannot protect {}: {e}", path.display())))?;
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .foreign_keys(true)
            .busy_timeout(BUSY_TIMEOUT)
            .pragma("wal_autocheckpoint", "1000")
            .pragma("journal_size_limit", WAL_LIMIT.to_string());
        let pool =
            SqlitePoolOptions::new().max_connections(FILE_POOL_SIZE).connect_with(options).await.map_err(db_error)?;
        let store = Self::migrated(pool).await?;
        let mut wal = path.as_os_str().to_owned();
        wal.push("-wal");
        tokio::spawn(keep_wal_bounded(store.pool.clone(), wal.into(), WAL_LIMIT, WAL_CHECK_EVERY));
        Ok(store)
    }

    /// A private in-memory database, for tests. An in-memory SQLite database lives
    /// and dies with its connection, so the pool holds exactly one connection and
    /// never retires it; clones of the store share it.
    pub async fn open_in_memory() -> Result<SqliteStore, StoreError> {
        let options = SqliteConnectOptions::new().in_memory(true).foreign_keys(true);
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            .idle_timeout(None)
            .max_lifetime(None)
            .connect_with(options)
            .await
            .map_err(db_error)?;
        Self::migrated(pool).await
    }

    /// Closes every connection, waiting for queries in flight. A file database can
    /// then be reopened (or copied) safely.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    async fn migrated(pool: SqlitePool) -> Result<SqliteStore, StoreError> {
        sqlx::migrate!("./migrations")
            .run(&pool)
            .await
            .map_err(|e| StoreError::Backend(format!("migrating the database: {e}")))?;
        Ok(SqliteStore { pool, fence: None })
    }
}

/// Checkpoints and truncates the WAL at `wal` whenever it has grown past `limit`
/// ([`WAL_LIMIT`]), looking `every` so often, until the pool is closed.
async fn keep_wal_bounded(pool: SqlitePool, wal: std::path::PathBuf, limit: u64, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if pool.is_closed() {
            return;
        }
        let size = std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
        if size <= limit {
            continue;
        }
        match sqlx::query_as::<_, (i64, i64, i64)>("PRAGMA wal_checkpoint(TRUNCATE)").fetch_one(&pool).await {
            // `busy`: a reader or writer held on past the busy timeout; the next tick retries.
            Ok((busy, _, _)) => tracing::debug!(size, busy = busy != 0, "checkpointed the WAL"),
            Err(e) => tracing::warn!(size, error = %e, "could not checkpoint the SQLite WAL"),
        }
    }
}

/// Creates the database file `0600` if it is missing, and takes group and other
/// permissions away from it and its `-wal` and `-shm` files if they exist.
fn private_files(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    match std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    for suffix in ["", "-wal", "-shm"] {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        let file = Path::new(&name);
        let mode = match std::fs::metadata(file) {
            Ok(meta) => meta.permissions().mode(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        if mode & 0o077 != 0 {
            std::fs::set_permissions(file, std::fs::Permissions::from_mode(mode & 0o700))?;
        }
    }
    Ok(())
}

crate::delegate::impl_store!(SqliteStore);

#[cfg(test)]
mod tests {
    use super::*;

    /// A WAL that grew past the limit without SQLite's own checkpoint resetting it (here:
    /// below the 1000 pages that start one) is checkpointed and cut to nothing.
    #[tokio::test]
    async fn a_wal_past_the_limit_is_checkpointed_and_truncated() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = SqliteStore::open(&dir.path().join("spool.db")).await.expect("open");
        sqlx::query("CREATE TABLE filler (data BLOB)").execute(&store.pool).await.expect("create");
        for _ in 0..48 {
            sqlx::query("INSERT INTO filler VALUES (zeroblob(65536))").execute(&store.pool).await.expect("insert");
        }
        let wal = dir.path().join("spool.db-wal");
        let size = || std::fs::metadata(&wal).map(|m| m.len()).expect("the WAL file");
        assert!(size() > 2 << 20, "3 MiB written: the WAL holds them, {} bytes", size());

        tokio::spawn(keep_wal_bounded(store.pool.clone(), wal.clone(), 1 << 20, Duration::from_millis(20)));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while size() > 0 {
            assert!(tokio::time::Instant::now() < deadline, "the WAL stayed at {} bytes", size());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM filler").fetch_one(&store.pool).await.expect("count");
        assert_eq!(rows, 48, "checkpointed into the database, nothing lost");
        store.close().await;
    }
}
