//! A PostgreSQL database of the run's own (`--database-url`), created on the given URL's
//! server and dropped at the end, so every run starts from empty tables and runs side
//! by side never meet. The same idea as the CLI tests' `TestDb`.
//!
//! Dropping is an explicit `async fn` called by `main` once the nodes have exited, not a
//! `Drop`: the bench has one runtime and a clear end, and a failed drop is reported
//! rather than swallowed.

use anyhow::{Context, Result};
use sqlx::{Connection, PgConnection};
use std::time::{SystemTime, UNIX_EPOCH};

pub struct BenchDb {
    /// The URL we were given: its server is where the database is created and dropped.
    server: String,
    name: String,
    /// The new database's URL, for `spool serve --database-url`.
    pub url: String,
}

impl BenchDb {
    pub async fn create(server: &str) -> Result<BenchDb> {
        let millis = SystemTime::now().duration_since(UNIX_EPOCH).expect("clock after 1970").as_millis();
        let name = format!("spool_bench_{}_{millis}", std::process::id());
        let mut admin = PgConnection::connect(server).await.context("connecting to --database-url")?;
        // A database name cannot be a bound parameter; this one is ours, letters and digits.
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut admin)
            .await
            .with_context(|| format!("creating database {name} (the role needs CREATEDB)"))?;
        admin.close().await?;
        Ok(BenchDb { server: server.to_owned(), url: database_url(server, &name)?, name })
    }

    /// Transactions committed and rolled back in the database so far, as PostgreSQL's
    /// statistics have them (flushed within about a second); `None` when unreadable.
    pub async fn transactions(&self) -> Option<u64> {
        let mut admin = PgConnection::connect(&self.server).await.ok()?;
        let count: Option<i64> = sqlx::query_scalar(
            "SELECT (xact_commit + xact_rollback)::bigint FROM pg_stat_database WHERE datname = $1",
        )
        .bind(&self.name)
        .fetch_optional(&mut admin)
        .await
        .ok()?;
        let _ = admin.close().await;
        count.map(|c| c as u64)
    }

    /// `WITH (FORCE)` ends connections a node left open (one that was killed, say).
    pub async fn drop_database(self) -> Result<()> {
        let mut admin = PgConnection::connect(&self.server).await?;
        sqlx::query(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name))
            .execute(&mut admin)
            .await
            .with_context(|| format!("dropping database {}", self.name))?;
        admin.close().await?;
        Ok(())
    }
}

/// `server` with its path replaced by `/name`; user, password, host and query stay.
fn database_url(server: &str, name: &str) -> Result<String> {
    let (scheme, rest) = server.split_once("://").context("--database-url must be a postgres:// URL")?;
    let (location, query) = rest.split_once('?').map_or((rest, String::new()), |(l, q)| (l, format!("?{q}")));
    let authority = location.split('/').next().unwrap_or(location);
    Ok(format!("{scheme}://{authority}/{name}{query}"))
}

#[cfg(test)]
mod tests {
    use super::database_url;

    #[test]
    fn the_database_replaces_the_path_and_keeps_the_rest() {
        let url = |s| database_url(s, "b").expect("a URL");
        assert_eq!(url("postgres://postgres@127.0.0.1:5432/postgres"), "postgres://postgres@127.0.0.1:5432/b");
        assert_eq!(url("postgres://u:p@h/db?sslmode=disable"), "postgres://u:p@h/b?sslmode=disable");
        assert_eq!(url("postgres://h:5432"), "postgres://h:5432/b");
    }
}
