//! Checks of a session's pending revert: one per session, replaced whole by the next,
//! read back as written, deleted on request and with its session.

use super::fixtures::*;
use spool_engine::Store;
use spool_engine::store::SessionRevert;

pub async fn a_sessions_pending_revert_is_replaced_whole_and_deleted_with_the_session(store: &dyn Store) {
    let (_, session) = new_session(store).await;
    assert_eq!(store.session_revert(&session.id).await.expect("get"), None, "none yet");
    let first = SessionRevert {
        session_id: session.id.clone(),
        owner_id: session.owner_id.clone(),
        message_index: 4,
        ordinal: Some(2),
        state: serde_json::json!({"pre": "abc", "restored": ["a.txt"]}),
        created_at: 1_000,
    };
    store.put_session_revert(&first).await.expect("put");
    assert_eq!(store.session_revert(&session.id).await.expect("get"), Some(first.clone()));

    let second =
        SessionRevert { message_index: 0, ordinal: None, state: serde_json::json!({"pre": null}), ..first.clone() };
    store.put_session_revert(&second).await.expect("replace");
    assert_eq!(store.session_revert(&session.id).await.expect("get"), Some(second.clone()), "replaced whole");

    assert!(store.delete_session_revert(&session.id).await.expect("delete"));
    assert!(!store.delete_session_revert(&session.id).await.expect("delete again"), "nothing left to delete");
    assert_eq!(store.session_revert(&session.id).await.expect("get"), None);

    store.put_session_revert(&first).await.expect("put");
    assert!(store.delete_session(&session.id).await.expect("delete session"));
    assert_eq!(store.session_revert(&session.id).await.expect("get"), None, "gone with its session");
}
