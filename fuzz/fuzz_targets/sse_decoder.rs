#![no_main]
//! See `spool_protocol::fuzzing::sse_decoder` for what this checks.

libfuzzer_sys::fuzz_target!(|data: &[u8]| spool_protocol::fuzzing::sse_decoder(data));
