//! Rebuilds the crate when a migration is added or edited: `sqlx::migrate!` embeds
//! the `migrations/` directory at compile time, and without this Cargo would not
//! know the directory is an input (sqlx's documented recommendation).

fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
