//! Checks of branches: shelving takes the turns from an index off the active path whole
//! (ids, parts, step records, the summary that covered them), unshelving brings them
//! back as they were and shelves what was there, and the versions of a turn are the
//! path's own and the branches shelved from the same place, in the order written.

use super::fixtures::*;
use serde_json::json;
use spool_engine::store::StepSnapshot;
use spool_engine::{Store, StoreError};
use spool_protocol::*;

/// An assistant message with every kind of content, numbers JSON is picky about
/// included, so a shelved copy that changes a byte shows.
fn rich_answer(timestamp: time::Millis) -> Message {
    Message::Assistant {
        content: vec![
            Content::Thinking { thinking: "ünïcødé 🦀 and \"quotes\"\n".into() },
            Content::Text { text: "I will look".into() },
            Content::ToolCall {
                id: "call_1".into(),
                name: "bash".into(),
                arguments: json!({"command": "ls", "big": u64::MAX, "small": i64::MIN, "float": 0.1, "none": null}),
            },
        ],
        stop_reason: Some(StopReason::ToolUse),
        usage: Usage { input: 7, output: 9, ..Usage::default() },
        model: "scripted".into(),
        error_message: None,
        timestamp,
    }
}

fn step_at(run: &Run, session: &Session, turn: u32, message_index: u64) -> StepSnapshot {
    StepSnapshot {
        run_id: run.id.clone(),
        turn,
        session_id: session.id.clone(),
        owner_id: session.owner_id.clone(),
        project_id: session.project_id.clone(),
        message_index,
        before_tree: format!("tree{turn}"),
        before_skipped: Default::default(),
        after_tree: None,
        after_skipped: None,
        node_id: "local".into(),
        created_at: time::now_ms(),
    }
}

pub async fn shelving_moves_turns_off_the_path_whole_and_unshelving_puts_them_back(store: &dyn Store) {
    let (_, session) = new_session(store).await;
    let stored = append_all(
        store,
        &session,
        vec![user("one"), assistant("two"), Message::user_text("three", 20), rich_answer(21), tool_result("ok")],
    )
    .await;
    let run = run_in(&session, "branches", RunStatus::Completed);
    store.insert_run(&run).await.expect("insert_run");
    let (early, late) = (step_at(&run, &session, 0, 1), step_at(&run, &session, 1, 3));
    store.insert_step_snapshot(&early).await.expect("step");
    store.insert_step_snapshot(&late).await.expect("step");
    let fact = Fact { text: "the repo has a README".into(), source: FactSource::Tool, at: 5 };
    let memory =
        SessionMemory { facts: vec![fact.clone()], summary: Some("they said one".into()), summarized_before: 3 };
    store.put_memory(&session.id, &session.owner_id, &memory).await.expect("put_memory");

    assert_eq!(store.shelve(&session.id, 5, BranchKind::Edit).await.expect("shelve"), None, "nothing at 5");
    assert_eq!(store.list_branches(&session.id).await.expect("list"), vec![], "and no branch made");
    assert_eq!(store.shelve(&session.id, 2, BranchKind::Edit).await.expect("shelve"), Some(1));

    assert_eq!(all_messages(store, &session).await, stored[..2], "the path ends before the edited turn");
    assert_eq!(store.count_messages(&session.id).await.expect("count"), 2);
    assert_eq!(store.list_step_snapshots(&session.id).await.expect("steps"), vec![early.clone()], "the path's steps");
    assert_eq!(
        store.get_memory(&session.id).await.expect("memory"),
        SessionMemory { facts: vec![fact.clone()], summary: None, summarized_before: 0 },
        "a summary of shelved turns is gone from the path, the facts stay"
    );
    let branches = store.list_branches(&session.id).await.expect("list");
    assert_eq!(branches.len(), 1);
    assert_eq!((branches[0].ordinal, branches[0].fork_index, branches[0].kind), (1, 2, BranchKind::Edit));
    assert_eq!(branches[0].preview, "three");
    assert_eq!(store.branch_messages(&session.id, 1).await.expect("read"), Some(stored[2..].to_vec()), "whole");
    assert_eq!(store.branch_messages(&session.id, 2).await.expect("read"), None, "no branch 2");
    assert_eq!(store.variants(&session.id, 0).await.expect("variants"), vec![], "no version at 2 on the path yet");

    // The edit's new version of the turn, written later.
    let edited = indexed(2, Message::user_text("three, edited", 30));
    let answer = indexed(3, assistant("new answer"));
    for m in [&edited, &answer] {
        store.insert_message(&session.id, &session.owner_id, m).await.expect("insert_message");
    }
    let versions = store.variants(&session.id, 0).await.expect("variants");
    assert_eq!(versions, vec![VariantSet { index: 2, position: 2, versions: vec![Some(1), None] }]);
    assert_eq!(store.variants(&session.id, 3).await.expect("variants"), vec![], "turns before 3 are not asked for");

    // Switching back: the edit is shelved, the first version returns as it was.
    assert_eq!(store.unshelve(&session.id, 1).await.expect("unshelve"), Some(2));
    assert_eq!(all_messages(store, &session).await, stored, "same ids, same content");
    assert_eq!(store.list_step_snapshots(&session.id).await.expect("steps"), vec![early, late], "its steps too");
    assert_eq!(store.get_memory(&session.id).await.expect("memory"), memory, "and its summary");
    assert_eq!(store.branch_messages(&session.id, 1).await.expect("read"), None, "branch 1 is the path again");
    let branches = store.list_branches(&session.id).await.expect("list");
    assert_eq!(
        branches.iter().map(|b| (b.ordinal, b.kind, b.preview.as_str())).collect::<Vec<_>>(),
        [(2, BranchKind::Switch, "three, edited")]
    );
    assert_eq!(store.branch_messages(&session.id, 2).await.expect("read"), Some(vec![edited, answer]));
    assert_eq!(
        store.variants(&session.id, 0).await.expect("variants"),
        vec![VariantSet { index: 2, position: 1, versions: vec![None, Some(2)] }]
    );

    let missing = store.unshelve(&session.id, 9).await;
    assert!(matches!(missing, Err(StoreError::Conflict(_))), "{missing:?}");
    assert_eq!(all_messages(store, &session).await, stored, "a failed switch changes nothing");

    assert!(store.delete_session(&session.id).await.expect("delete"));
    assert_eq!(store.list_branches(&session.id).await.expect("list"), vec![], "branches go with their session");
}

pub async fn a_branch_shelved_inside_another_is_a_version_only_of_its_own_path(store: &dyn Store) {
    let (_, session) = new_session(store).await;
    append_all(store, &session, vec![user("a"), assistant("b"), Message::user_text("c", 20), assistant("d")]).await;
    // Turn 0 edited: everything shelved as branch 1, a new path written.
    assert_eq!(store.shelve(&session.id, 0, BranchKind::Edit).await.expect("shelve"), Some(1));
    for m in [
        indexed(0, Message::user_text("a2", 30)),
        indexed(1, assistant("b2")),
        indexed(2, Message::user_text("c2", 40)),
    ] {
        store.insert_message(&session.id, &session.owner_id, &m).await.expect("insert");
    }
    // Turn 2 of the new path regenerated: a version of "c2", not of "c".
    assert_eq!(store.shelve(&session.id, 2, BranchKind::Regenerate).await.expect("shelve"), Some(2));
    store
        .insert_message(&session.id, &session.owner_id, &indexed(2, Message::user_text("c2", 50)))
        .await
        .expect("insert");
    assert_eq!(
        store.variants(&session.id, 0).await.expect("variants"),
        vec![
            VariantSet { index: 0, position: 2, versions: vec![Some(1), None] },
            VariantSet { index: 2, position: 2, versions: vec![Some(2), None] },
        ]
    );
    // Back on the first path, turn 2 has one version: branch 2 hangs off "b2", not "b".
    assert_eq!(store.unshelve(&session.id, 1).await.expect("unshelve"), Some(3));
    assert_eq!(
        store.variants(&session.id, 0).await.expect("variants"),
        vec![VariantSet { index: 0, position: 1, versions: vec![None, Some(3)] }]
    );
}
