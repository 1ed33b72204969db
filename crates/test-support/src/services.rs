//! The PostgreSQL and Redis the service tests use, found from the environment:
//! `SPOOL_TEST_DATABASE_URL` (a server whose role may create databases) and
//! `SPOOL_TEST_REDIS_URL`. Tests that need them are gated at build time
//! (`cfg(spool_postgres)`, `cfg(spool_redis)`, set by the crates' build scripts from the
//! same variables), so outside CI they show as ignored, never as passed; one that runs
//! without its variable anyway fails here, naming it.

use sqlx::{Connection, PgConnection};

pub const DATABASE_VAR: &str = "SPOOL_TEST_DATABASE_URL";
pub const REDIS_VAR: &str = "SPOOL_TEST_REDIS_URL";

/// The test Redis (tests keep to keys of their own).
pub fn redis_url() -> String {
    match std::env::var(REDIS_VAR) {
        Ok(url) if !url.trim().is_empty() => url,
        _ => panic!("{REDIS_VAR} is not set: set it to a Redis the tests may use, e.g. redis://127.0.0.1:6379"),
    }
}

/// A database of one test's own on the test server, dropped on drop.
pub struct TestDb {
    server: String,
    name: String,
    /// The database's URL (the server's, with this database as its path).
    pub url: String,
}

impl TestDb {
    /// A fresh, empty database.
    pub async fn create() -> TestDb {
        let server = match std::env::var(DATABASE_VAR) {
            Ok(url) if !url.trim().is_empty() => url,
            _ => panic!(
                "{DATABASE_VAR} is not set: set it to a PostgreSQL server whose role may create databases, \
                 e.g. postgres://postgres@127.0.0.1:5432/postgres"
            ),
        };
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("after 1970").as_nanos();
        let name = format!("spool_test_{}_{nanos}", std::process::id());
        let mut admin = PgConnection::connect(&server).await.expect("connect to the test server");
        // A database name cannot be a bound parameter; this one is ours, letters and digits.
        sqlx::query(&format!("CREATE DATABASE {name}")).execute(&mut admin).await.expect("create database");
        admin.close().await.expect("close");
        let url = with_database(&server, &name);
        TestDb { server, name, url }
    }

    /// A plain connection to the database, for what the API cannot do.
    pub async fn raw(&self) -> PgConnection {
        PgConnection::connect(&self.url).await.expect("raw connection")
    }
}

impl Drop for TestDb {
    /// Drop cannot await, and the test's runtime may be gone (a panic), so the drop
    /// runs on a runtime of its own on another thread. `WITH (FORCE)` ends whatever
    /// connections the test left open.
    fn drop(&mut self) {
        let (server, name) = (self.server.clone(), self.name.clone());
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            runtime.block_on(async {
                let mut admin = PgConnection::connect(&server).await?;
                sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).execute(&mut admin).await?;
                admin.close().await
            })
        })
        .join();
        if !matches!(dropped, Ok(Ok(()))) {
            eprintln!("could not drop test database {}: {dropped:?}", self.name);
        }
    }
}

/// `url` with its database (the path) replaced by `name`, its query kept.
pub fn with_database(url: &str, name: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or_else(|| panic!("{url:?} is not a URL"));
    let (location, query) = match rest.split_once('?') {
        Some((location, query)) => (location, format!("?{query}")),
        None => (rest, String::new()),
    };
    let authority = location.split('/').next().unwrap_or(location);
    format!("{scheme}://{authority}/{name}{query}")
}
