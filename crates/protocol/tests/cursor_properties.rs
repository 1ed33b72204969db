//! Property tests for the cursor parser: what a stream prints as an SSE id parses back
//! to the same position, and anything else a client sends as `Last-Event-ID` is either
//! rejected or names a position that prints and parses consistently.

use proptest::prelude::*;
use spool_protocol::{Cursor, StreamId};

fn stream_id() -> impl Strategy<Value = StreamId> {
    "stm_[0-9a-zA-Z]{26}".prop_map(|s| s.parse().expect("the pattern is a valid stream id"))
}

fn cursor() -> impl Strategy<Value = Cursor> {
    (stream_id(), any::<u64>()).prop_map(|(stream_id, seq)| Cursor { stream_id, seq })
}

/// Checks what the parser made of `raw`, whatever that was.
fn parses_consistently(raw: &str) -> Result<(), TestCaseError> {
    if let Some(parsed) = Cursor::parse(raw) {
        let printed = parsed.to_string();
        prop_assert_eq!(Cursor::parse(&printed), Some(parsed.clone()), "{:?} printed as {:?}", raw, printed);
        let (stream, seq) = raw.trim().rsplit_once(':').expect("a cursor has a colon");
        prop_assert_eq!(stream, parsed.stream_id.as_str());
        prop_assert_eq!(seq.parse::<u64>().ok(), Some(parsed.seq));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn printed_cursors_parse_back(c in cursor()) {
        prop_assert_eq!(Cursor::parse(&c.to_string()), Some(c));
    }

    /// Surrounding whitespace (a header value may carry some) does not change the cursor.
    #[test]
    fn surrounding_whitespace_is_ignored(c in cursor(), before in "[ \t\r\n]{0,3}", after in "[ \t\r\n]{0,3}") {
        prop_assert_eq!(Cursor::parse(&format!("{before}{c}{after}")), Some(c));
    }

    #[test]
    fn arbitrary_text_is_rejected_or_consistent(raw in "\\PC{0,80}") {
        parses_consistently(&raw)?;
    }

    /// Near misses: a valid cursor with a few characters replaced, inserted or cut off.
    #[test]
    fn mangled_cursors_are_rejected_or_consistent(
        c in cursor(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), "[:0-9a-z_ +\\-é]?"), 1..4),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut chars: Vec<char> = c.to_string().chars().collect();
        for (at, text) in edits {
            let i = at.index(chars.len());
            chars.splice(i..=i, text.chars());
        }
        chars.truncate(cut.index(chars.len() + 1).max(1));
        let raw: String = chars.into_iter().collect();
        parses_consistently(&raw)?;
    }

    #[test]
    fn a_seq_beyond_u64_or_not_decimal_is_rejected(s in stream_id(), seq in "([+-][0-9]{1,5}|[1-9][0-9]{20,24}|0x[0-9a-f]{1,4}|[0-9]{0,3}[ a-f.][0-9]{1,3})") {
        prop_assert_eq!(Cursor::parse(&format!("{s}:{seq}")), None);
    }
}
