//! The integration tests of this crate, one module a file, linked as one test
//! binary (`autotests = false` in its Cargo.toml): one link and one copy of the
//! shared generic code instead of one a file. A file's tests are `FILE::…`, so
//! `cargo test -p spool-server --test server FILE::` runs just those.

mod common;

mod ag_ui;
mod always_patterns;
mod api;
mod approvals;
mod auth;
mod auth_matrix;
mod browser_trust;
mod caps;
mod cluster;
mod connections;
mod context;
mod event_stream_conn;
mod fold;
mod fork;
mod fuzz_corpus;
mod gate;
mod hub_conformance;
mod hub_publish;
mod leases;
mod limits;
mod lists;
mod mcp_api;
mod mcp_http;
mod mcp_lifecycle;
mod live_asks;
mod mcp_live;
mod mcp_dialects;
mod mcp_python;
mod mcp_sampling;
mod mcp_stdio;
mod mcp_support;
mod metrics;
mod native_conformance;
mod openapi;
mod opencode;
mod permissions;
mod plans;
mod providers;
mod questions;
mod queue;
mod redaction;
mod replay;
mod root_swap;
mod roots;
mod run_stream;
mod sandbox;
mod search;
mod search_limits;
mod serve;
mod shared_root;
mod snapshots;
mod stops;
mod stream;
mod streams;
mod todos;
mod tool_diff;
mod tool_sources;
mod tool_output;
mod ui;
mod usage;
mod ws;
