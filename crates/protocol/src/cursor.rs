//! Stream cursors: `streamId:seq`, the SSE `id` of every business frame.
//!
//! A client sends its last cursor back as `Last-Event-ID` (or `?cursor=`) to resume.
//! Parsing is strict and total: anything that is not exactly a stream id, a colon and
//! a decimal `u64` is "no usable cursor", which the stream answers with a snapshot.

use crate::ids::StreamId;
use std::fmt;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cursor {
    pub stream_id: StreamId,
    pub seq: u64,
}

impl Cursor {
    /// Parses `streamId:seq`. Returns `None` for anything malformed.
    pub fn parse(raw: &str) -> Option<Cursor> {
        let (stream, seq) = raw.trim().rsplit_once(':')?;
        if seq.is_empty() || !seq.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        Some(Cursor { stream_id: stream.parse().ok()?, seq: seq.parse().ok()? })
    }
}

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.stream_id, self.seq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_what_it_prints() {
        let c = Cursor { stream_id: StreamId::new(), seq: 42 };
        assert_eq!(Cursor::parse(&c.to_string()), Some(c));
    }

    #[test]
    fn rejects_malformed() {
        let s = StreamId::new();
        for bad in [
            "",
            ":",
            "x:1",
            &format!("{s}:"),
            &format!("{s}:-1"),
            &format!("{s}:+1"),
            &format!("{s}:1a"),
            &format!("{s}:99999999999999999999999"),
        ] {
            assert_eq!(Cursor::parse(bad), None, "{bad}");
        }
    }

    proptest! {
        #[test]
        fn never_panics(raw in ".{0,80}") {
            let _ = Cursor::parse(&raw);
        }
    }
}
