//! The store, read directly: the runs and claims no client knows of count too.

use sqlx::Connection;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The server's database, read beside it (SQLite read-only): the runs and claims no
/// client knows of count too.
pub(super) enum Database {
    Sqlite(PathBuf),
    Postgres(String),
}

pub(super) const RUNNING: &str = "SELECT id FROM runs WHERE status = 'running'";
pub(super) const INTERRUPTED_UNPARKED: &str = "SELECT r.id FROM runs r WHERE r.status = 'interrupted' AND NOT EXISTS \
     (SELECT 1 FROM approvals a WHERE a.run_id = r.id AND a.status = 'pending')";
pub(super) const OPEN_CLAIMS: &str = "SELECT scope || ' ' || key FROM idempotency WHERE answer IS NULL";

impl Database {
    pub(super) async fn rows(&self, sql: &str) -> Vec<String> {
        match self {
            Database::Sqlite(path) => {
                use sqlx::ConnectOptions;
                let options = sqlx::sqlite::SqliteConnectOptions::new().filename(path).read_only(true);
                let mut conn = options.connect().await.expect("open the database read-only");
                let rows = sqlx::query_scalar(sql).fetch_all(&mut conn).await.expect("query");
                conn.close().await.expect("close");
                rows
            }
            Database::Postgres(url) => {
                let mut conn = sqlx::PgConnection::connect(url).await.expect("connect to the test database");
                let rows = sqlx::query_scalar(sql).fetch_all(&mut conn).await.expect("query");
                conn.close().await.expect("close");
                rows
            }
        }
    }

    /// Makes the open claims look three minutes old: past the two after which a
    /// shared store's reaper releases them.
    pub(super) async fn age_open_claims(&self) {
        let Database::Postgres(url) = self else { return };
        let mut conn = sqlx::PgConnection::connect(url).await.expect("connect to the test database");
        sqlx::query("UPDATE idempotency SET created_at = created_at - 180000 WHERE answer IS NULL")
            .execute(&mut conn)
            .await
            .expect("age the claims");
        conn.close().await.expect("close");
    }

    /// Polls the query until it finds nothing; what it finds after `within` otherwise.
    pub(super) async fn none_within(&self, within: Duration, sql: &str) -> Result<(), Vec<String>> {
        let deadline = Instant::now() + within;
        loop {
            let left = self.rows(sql).await;
            if left.is_empty() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(left);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
