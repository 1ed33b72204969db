//! The session state projection, defined once in `spool_protocol::view` (clients fold
//! frames with the same functions) and re-exported here, where the run loop uses it.

pub use spool_protocol::view::*;

/// A new session's state, no messages yet: what the engine's unit tests start from.
#[cfg(test)]
pub(crate) fn test_state() -> spool_protocol::frame::SessionState {
    let session = spool_protocol::Session {
        id: spool_protocol::SessionId::new(),
        project_id: spool_protocol::ProjectId::new(),
        owner_id: spool_protocol::UserId::new(),
        title: "t".into(),
        title_set: true,
        archived: false,
        permissions: vec![],
        model: None,
        mode: Default::default(),
        read_index: None,
        created_at: 0,
        updated_at: 0,
    };
    initial_state(session, vec![], 0)
}
