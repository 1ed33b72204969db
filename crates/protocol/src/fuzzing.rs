//! The checks the `cargo fuzz` targets in `fuzz/` run, one function per target.
//!
//! They live here, not in the fuzz crate, so `cargo test` runs them too: the protocol
//! crate's tests feed every file of the committed seed corpus through these functions,
//! and a change that breaks a target's assumptions fails the normal suite instead of
//! waiting for someone to fuzz again. Each function panics when a property breaks;
//! that panic is what the fuzzer reports as a crash.

use crate::cursor::Cursor;
use crate::sse::{self, Decoder};

/// SSE decoder target. The first byte says how many of the following bytes are chunk
/// lengths (0–7, each 1–256, used in turn); the rest is the stream. Checks that
/// * decoding never panics,
/// * the chunked decode yields exactly the events of a one-piece decode, and
/// * every decoded event re-encodes to bytes that decode to that same event.
pub fn sse_decoder(data: &[u8]) {
    let Some((&head, rest)) = data.split_first() else { return };
    let (lengths, stream) = rest.split_at(usize::from(head % 8).min(rest.len()));

    let whole = Decoder::new().push(stream);
    let mut decoder = Decoder::new();
    let mut chunked = Vec::new();
    let mut lengths = lengths.iter().cycle();
    let mut rest = stream;
    while !rest.is_empty() {
        // With no lengths the stream arrives in one piece.
        let len = lengths.next().map_or(rest.len(), |&l| usize::from(l) + 1);
        let (chunk, tail) = rest.split_at(len.min(rest.len()));
        chunked.extend(decoder.push(chunk));
        rest = tail;
    }
    assert_eq!(chunked, whole, "a different split of the same bytes decoded differently");

    for event in &whole {
        let bytes = sse::encode(event.id.as_deref(), event.event.as_deref(), &event.data);
        let again = Decoder::new().push(&bytes);
        assert_eq!(again, std::slice::from_ref(event), "re-encoding changed the event");
    }
}

/// Cursor target: any input, UTF-8 or not, is either rejected or parses to a cursor
/// whose printed form names the same stream and parses back to the same cursor.
pub fn cursor(data: &[u8]) {
    let Ok(raw) = std::str::from_utf8(data) else { return };
    let Some(cursor) = Cursor::parse(raw) else { return };
    let printed = cursor.to_string();
    assert_eq!(Cursor::parse(&printed).as_ref(), Some(&cursor), "`{printed}` does not parse back");
    let (stream, _) = raw.trim().rsplit_once(':').expect("a parsed cursor has a colon");
    assert_eq!(stream, cursor.stream_id.as_str(), "the stream id changed in parsing");
}
