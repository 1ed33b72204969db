//! Rebuilds the crate when a migration is added or edited: `sqlx::migrate!` embeds
//! the `migrations/` (SQLite) and `migrations-pg/` (PostgreSQL) directories at compile
//! time, and without this Cargo would not know they are inputs (sqlx's documented
//! recommendation).
//!
//! Also sets `cfg(spool_postgres)` when `SPOOL_TEST_DATABASE_URL` is set, or under CI:
//! the PostgreSQL tests are `#[ignore]`d without it, so a machine with no PostgreSQL
//! lists them as ignored instead of passing them unrun (tests/postgres.rs).

fn main() {
    println!("cargo:rerun-if-changed=migrations");
    println!("cargo:rerun-if-changed=migrations-pg");
    println!("cargo:rustc-check-cfg=cfg(spool_postgres)");
    for var in ["SPOOL_TEST_DATABASE_URL", "CI"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    if is_set("SPOOL_TEST_DATABASE_URL") || std::env::var_os("CI").is_some() {
        println!("cargo:rustc-cfg=spool_postgres");
    }
}

fn is_set(var: &str) -> bool {
    std::env::var(var).is_ok_and(|v| !v.trim().is_empty())
}
