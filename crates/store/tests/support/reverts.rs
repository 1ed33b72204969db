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

pub async fn a_projects_pending_reverts_are_read_together_and_a_final_one_is_left_out(store: &dyn Store) {
    let (project, session) = new_session(store).await;
    let other = session_in(&project, 1_000, false);
    store.insert_session(&other).await.expect("insert_session");
    let (_, elsewhere) = new_session(store).await;
    for s in [&session, &other, &elsewhere] {
        store.insert_message(&s.id, &s.owner_id, &indexed(0, user("first"))).await.expect("insert");
    }
    let revert = |s: &spool_protocol::Session| SessionRevert {
        session_id: s.id.clone(),
        owner_id: s.owner_id.clone(),
        message_index: 1,
        ordinal: Some(1),
        state: serde_json::json!({"pre": "abc"}),
        created_at: 1_000,
    };
    for s in [&session, &other, &elsewhere] {
        store.put_session_revert(&revert(s)).await.expect("put");
    }
    let mut pending = store.pending_session_reverts(&project.id).await.expect("list");
    pending.sort_by(|a, b| a.session_id.as_str().cmp(b.session_id.as_str()));
    let mut expected = vec![revert(&session), revert(&other)];
    expected.sort_by(|a, b| a.session_id.as_str().cmp(b.session_id.as_str()));
    assert_eq!(pending, expected, "both of the project's, whole, and none of another project's");

    // A prompt after the revert: the session holds a message at its index again.
    store.insert_message(&other.id, &other.owner_id, &indexed(1, user("again"))).await.expect("insert");
    let pending = store.pending_session_reverts(&project.id).await.expect("list");
    assert_eq!(pending, vec![revert(&session)], "a revert a prompt made final is not pending");
}
