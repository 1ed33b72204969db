#![no_main]
//! See `spool_server::fuzzing::request_json` for what this checks.

libfuzzer_sys::fuzz_target!(|data: &[u8]| drop(spool_server::fuzzing::request_json(data)));
