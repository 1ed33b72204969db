//! OpenCode message and part ids, derived from the session and the message's absolute
//! index instead of stored.
//!
//! The stream must name a message the moment it starts, before the store has given it
//! its `msg_…` row id (that happens when it ends), and the history endpoint must later
//! name it the same way. Deriving both from `(session, index)` makes them agree with
//! nothing kept in memory or on disk. The body is the session's ULID body followed by
//! the zero-padded index (and part number), so ids of one session sort in message and
//! part order as plain strings — the order OpenCode clients sort by.
//!
//! Part numbers: `0` is the step-start, content block `i` is `i + 1`, the step-finish
//! comes after the last block.

use spool_protocol::SessionId;

const INDEX_DIGITS: usize = 10;

fn body(session: &SessionId) -> &str {
    &session.as_str()[SessionId::PREFIX.len() + 1..]
}

pub fn message_id(session: &SessionId, index: u64) -> String {
    format!("msg_{}{index:0INDEX_DIGITS$}", body(session))
}

pub fn part_id(session: &SessionId, index: u64, part: usize) -> String {
    format!("prt_{}{index:0INDEX_DIGITS$}{part:04}", body(session))
}

/// The part number of content block `content`.
pub fn content_part(content: usize) -> usize {
    content + 1
}

/// The message index a message id of `session` names, if it names one.
pub fn message_index(session: &SessionId, id: &str) -> Option<u64> {
    let digits = id.strip_prefix("msg_")?.strip_prefix(body(session))?;
    if digits.len() != INDEX_DIGITS || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_sort_in_message_and_part_order() {
        let s = SessionId::new();
        let (a, b) = (message_id(&s, 9), message_id(&s, 10));
        assert!(a < b);
        assert_eq!(message_index(&s, &b), Some(10));
        assert_eq!(message_index(&SessionId::new(), &b), None);
        assert_eq!(message_index(&s, "msg_x"), None);
        assert!(part_id(&s, 3, 0) < part_id(&s, 3, content_part(0)));
        assert!(part_id(&s, 3, 12) < part_id(&s, 4, 0));
        assert!(a.starts_with("msg_") && part_id(&s, 9, 1).starts_with("prt_"));
    }
}
