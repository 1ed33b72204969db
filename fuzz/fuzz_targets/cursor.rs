#![no_main]
//! See `spool_protocol::fuzzing::cursor` for what this checks.

libfuzzer_sys::fuzz_target!(|data: &[u8]| spool_protocol::fuzzing::cursor(data));
