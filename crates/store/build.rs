//! Rebuilds the crate when a migration is added or edited: `sqlx::migrate!` embeds
//! the `migrations/` (SQLite) and `migrations-pg/` (PostgreSQL) directories at compile
//! time, and without this Cargo would not know they are inputs (sqlx's documented
//! recommendation).

fn main() {
    println!("cargo:rerun-if-changed=migrations");
    println!("cargo:rerun-if-changed=migrations-pg");
}
