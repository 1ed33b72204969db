//! The store's SQL, one module per record kind, written once for both databases.
//!
//! This directory is not a module of its own: each backend compiles it into itself
//! (`sqlite::sql`, `pg::sql`, through a `#[path]` attribute), next to a `dialect`
//! module that names the backend's database and pool type and holds what the two
//! databases really do differently. So every function here is ordinary, concretely
//! typed sqlx code, built twice, once against `sqlx::Sqlite` and once against
//! `sqlx::Postgres`; a statement that one of them rejects fails that backend's tests,
//! and a name `dialect` lacks fails that backend's build.
//!
//! Why this and not the alternatives: functions generic over `sqlx::Database` need a
//! bound for every type they bind or read and for the executor of every call, which
//! would outweigh the SQL they share; one `macro_rules!` holding every module would
//! hide the code from rustfmt and point errors into the macro. Including the same
//! files twice keeps them plain Rust (Clippy's `duplicate_mod` lint is allowed where
//! they are included, for this reason).
//!
//! One SQL text serves both because they agree on nearly all of it: numbered
//! parameters (`$1`, which sqlx's SQLite driver binds by number, and which may repeat),
//! `INSERT … ON CONFLICT … DO NOTHING / DO UPDATE … WHERE`, `DELETE … RETURNING`, and
//! JSON bound as [`sqlx::types::Json`], which SQLite stores as text (its CHECKs make
//! sure it parses) and PostgreSQL as `JSONB`. Reading rows back is shared too, in
//! [`rows`](crate::rows). The two schemas are still two migration directories,
//! because their column types differ.
//!
//! Where the databases do differ, `dialect` says so: a list parameter (`fail_running`
//! keeps some runs; PostgreSQL binds an array, SQLite a JSON array it unpacks with
//! `json_each`). The atomic writes are the same statements on both, and each module
//! says why they are atomic on each database: SQLite runs one writer at a time, while
//! PostgreSQL (READ COMMITTED) makes a second writer of a row wait for the first and
//! re-check its condition against the committed row.

pub(crate) mod approvals;
pub(crate) mod attachments;
pub(crate) mod auth;
pub(crate) mod branches;
pub(crate) mod drafts;
pub(crate) mod idempotency;
pub(crate) mod leases;
pub(crate) mod memory;
pub(crate) mod messages;
pub(crate) mod outbox;
pub(crate) mod projects;
pub(crate) mod push;
pub(crate) mod queue;
pub(crate) mod reverts;
pub(crate) mod run_frames;
pub(crate) mod runs;
pub(crate) mod search;
pub(crate) mod sessions;
pub(crate) mod step_snapshots;
pub(crate) mod todos;
pub(crate) mod tokens;
pub(crate) mod tool_sources;
pub(crate) mod users;

/// The backend this copy of the modules is compiled into, seen by them as `super::dialect`.
use super::dialect;
