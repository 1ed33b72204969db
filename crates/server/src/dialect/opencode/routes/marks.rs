//! Prompt marks: where a session's stream stood just before an OpenCode prompt.
//!
//! A `/event` connection follows a session when a change names it — after the prompt
//! was accepted. With a fast model the whole run can be over by then, and a snapshot
//! of an idle session says nothing about it. So the prompt routes note the session's
//! cursor right before prompting, and a connection that starts following the session
//! subscribes from that cursor: the native stream replays the run from its
//! `run.accepted` on (or, if the buffer no longer holds it, sends a snapshot). Marks are
//! a few dozen bytes and expire after [`TTL`]; by then every connection has long
//! followed the session, or the run is too old to replay anyway.

use spool_protocol::{Cursor, SessionId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a mark is kept.
pub const TTL: Duration = Duration::from_secs(300);

/// Shared by the routes of one server (a cheap handle).
#[derive(Clone, Default)]
pub struct PromptMarks {
    /// A std mutex: held for a map lookup or insert, never across an await.
    marks: Arc<Mutex<HashMap<SessionId, (Cursor, Instant)>>>,
}

impl PromptMarks {
    pub fn set(&self, session: SessionId, cursor: Cursor) {
        let now = Instant::now();
        let mut marks = self.marks.lock().unwrap_or_else(|p| p.into_inner());
        marks.retain(|_, (_, at)| now.duration_since(*at) < TTL);
        marks.insert(session, (cursor, now));
    }

    pub fn get(&self, session: &SessionId) -> Option<Cursor> {
        let marks = self.marks.lock().unwrap_or_else(|p| p.into_inner());
        marks.get(session).filter(|(_, at)| at.elapsed() < TTL).map(|(c, _)| c.clone())
    }
}
