//! Golden frames: the `insta` settings that make a recorded stream comparable from run
//! to run. Ids are numbered in the order they first appear (`<ses 1>`, `<run 2>`, the
//! same id the same number everywhere in the snapshot, so a snapshot still shows which
//! frames name the same record), and clock values become `<ms>`. Tests bind the
//! settings around `insta::assert_json_snapshot!`:
//!
//! ```text
//! let mut settings = spool_test_support::golden::settings();
//! settings.add_redaction(".**.cursor", "<cursor>");
//! settings.bind(|| insta::assert_json_snapshot!(frames));
//! ```
//!
//! The redactions name the fields that carry ids and times. A field that is not named
//! keeps its value, so an id in a new field shows up as a snapshot that differs on
//! every run: a failure that names the field to add here, never a silent gap.

use insta::internals::Content;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Fields that hold record ids, in every dialect's spelling.
pub const ID_FIELDS: &[&str] = &[
    "id",
    "sessionId",
    "runId",
    "messageId",
    "projectId",
    "streamId",
    "toolCallId",
    "approvalId",
    "interruptId",
    "session_id",
    "run_id",
    "msg_id",
    "message_id",
    "channel_id",
    "request_id",
    "author_id",
    "trigger_msg_id",
    "tool_call_id",
];

/// Fields that hold a time or a duration in milliseconds.
pub const CLOCK_FIELDS: &[&str] = &["timestamp", "duration_ms", "expiresAt", "expires_at"];

/// Whether `s` has the shape of a Spool id: three letters, `_`, a 26-character ULID.
pub fn looks_like_id(s: &str) -> bool {
    s.len() == 30 && s.as_bytes()[3] == b'_' && s[..3].bytes().all(|b| b.is_ascii_lowercase())
}

/// The settings for one golden snapshot (a fresh numbering of ids each call).
pub fn settings() -> insta::Settings {
    let mut settings = insta::Settings::clone_current();
    // The numbering is shared by the id fields' redactions and kept across a snapshot;
    // a std mutex, as no await happens while it is held. insta visits values in
    // document order, so the numbers follow first appearance.
    let ids: Arc<Mutex<HashMap<String, String>>> = Arc::default();
    // One redaction for every id field, not one per field: insta applies redactions one
    // after another over the whole value, and the numbers must follow the document.
    let selector = |fields: &[&str]| fields.iter().map(|f| format!(".**.{f}")).collect::<Vec<_>>().join(", ");
    settings.add_redaction(
        &selector(ID_FIELDS),
        insta::dynamic_redaction(move |value, _| match value.as_str() {
            Some(s) if looks_like_id(s) => {
                let mut ids = ids.lock().expect("no test panics while numbering");
                let n = ids.len() + 1;
                let placeholder = ids.entry(s.to_owned()).or_insert_with(|| format!("<{} {n}>", &s[..3]));
                Content::from(placeholder.clone())
            }
            _ => value,
        }),
    );
    settings.add_redaction(
        &selector(CLOCK_FIELDS),
        insta::dynamic_redaction(|value, _| {
            let number = value.as_u64().is_some() || value.as_i64().is_some() || value.as_f64().is_some();
            if number { Content::from("<ms>") } else { value }
        }),
    );
    settings
}
