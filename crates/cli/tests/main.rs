//! The integration tests of this crate, one module a file, linked as one test
//! binary (`autotests = false` in its Cargo.toml): one link and one copy of the
//! shared generic code instead of one a file. A file's tests are `FILE::…`, so
//! `cargo test -p spool --test cli FILE::` runs just those.

mod common;

mod answer_checkpoints;
mod auth;
mod bus_forgery;
mod chat;
mod cluster;
mod crash;
mod crash_points;
mod credentials;
mod data_dir;
mod default_data_dir;
mod drafts;
mod exactly_once;
mod git_poll;
mod hub;
mod idle_http2;
mod mcp_server;
mod node_loss;
mod operators;
mod otlp;
mod permission_spellings;
mod pauses;
mod postgres;
mod readme;
mod replay_nodes;
mod sandbox;
mod serve;
mod streams;
mod tls;
