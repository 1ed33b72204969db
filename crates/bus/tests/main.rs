//! The integration tests of this crate, one module a file, linked as one test
//! binary (`autotests = false` in its Cargo.toml): one link and one copy of the
//! shared generic code instead of one a file. A file's tests are `FILE::…`, so
//! `cargo test -p spool-bus --test bus FILE::` runs just those.

mod bus;
mod cluster;
mod lag;
mod presence;
