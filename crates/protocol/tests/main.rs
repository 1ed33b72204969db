//! The integration tests of this crate, one module a file, linked as one test
//! binary (`autotests = false` in its Cargo.toml): one link and one copy of the
//! shared generic code instead of one a file. A file's tests are `FILE::…`, so
//! `cargo test -p spool-protocol --test protocol FILE::` runs just those.

mod cursor_properties;
mod fuzz_corpus;
mod golden_frames;
mod sse_properties;
