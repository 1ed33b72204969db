//! Checks of step snapshot records: a step is recorded once, its after tree completes
//! it and names its message, the session's steps come back in conversation order with
//! what they left out, and they go with their run; retention deletes old records, and
//! a project's named trees are those its remaining records hold.

use super::fixtures::*;
use spool_engine::Store;
use spool_engine::snapshots::Skipped;
use spool_engine::store::{SessionRevert, StepSnapshot};
use spool_protocol::*;

fn step(run: &Run, session: &Session, turn: u32, message_index: u64, before: &str) -> StepSnapshot {
    StepSnapshot {
        run_id: run.id.clone(),
        turn,
        session_id: run.session_id.clone(),
        owner_id: run.owner_id.clone(),
        project_id: session.project_id.clone(),
        message_index,
        before_tree: before.into(),
        before_skipped: Skipped { paths: vec!["big.bin".into()], count: 3 },
        after_tree: None,
        after_skipped: None,
        node_id: "local".into(),
        created_at: time::now_ms(),
    }
}

pub async fn step_snapshots_are_recorded_once_completed_by_their_after_and_listed_in_order(store: &dyn Store) {
    let (_, session) = new_session(store).await;
    let run = run_in(&session, "steps", RunStatus::Completed);
    store.insert_run(&run).await.expect("insert_run");
    let (first, second) = (step(&run, &session, 0, 1, "aaa"), step(&run, &session, 1, 3, "bbb"));
    store.insert_step_snapshot(&second).await.expect("insert");
    store.insert_step_snapshot(&first).await.expect("insert");
    // A second `before` of the same step changes nothing.
    store.insert_step_snapshot(&step(&run, &session, 0, 1, "zzz")).await.expect("insert again");

    let none = Skipped::default();
    assert_eq!(store.finish_step_snapshot(&run.id, 7, "ccc", &none).await.expect("finish"), None, "no such step");
    assert_eq!(store.finish_step_snapshot(&run.id, 0, "ccc", &none).await.expect("finish"), Some(1));

    let listed = store.list_step_snapshots(&session.id).await.expect("list");
    let done = StepSnapshot { after_tree: Some("ccc".into()), after_skipped: Some(none), ..first };
    assert_eq!(listed, vec![done, second], "in message order, the first completed");
    assert!(store.delete_session(&session.id).await.expect("delete"));
    assert_eq!(store.list_step_snapshots(&session.id).await.expect("list"), vec![], "deleted with its run");
}

pub async fn retention_deletes_old_step_records_and_the_trees_named_are_the_rest(store: &dyn Store) {
    let (_, session) = new_session(store).await;
    let (_, elsewhere) = new_session(store).await;
    let run = run_in(&session, "retained-steps", RunStatus::Completed);
    let other = run_in(&elsewhere, "other-project", RunStatus::Completed);
    for run in [&run, &other] {
        store.insert_run(run).await.expect("insert_run");
    }
    let now = time::now_ms();
    let old = StepSnapshot { created_at: 1_000, ..step(&run, &session, 0, 1, "old-before") };
    let new = StepSnapshot { created_at: now, ..step(&run, &session, 1, 3, "new-before") };
    let shared = StepSnapshot { created_at: now, ..step(&run, &session, 2, 5, "shared") };
    for s in [&old, &new, &shared, &step(&other, &elsewhere, 0, 1, "other-project")] {
        store.insert_step_snapshot(s).await.expect("insert");
    }
    let none = Skipped::default();
    store.finish_step_snapshot(&run.id, 0, "old-after", &none).await.expect("finish");
    store.finish_step_snapshot(&run.id, 1, "shared", &none).await.expect("finish");

    let named = store.snapshot_trees(&session.project_id).await.expect("trees");
    assert_eq!(named, ["new-before", "old-after", "old-before", "shared"], "each tree once, this project's only");

    // Another pass over a shared database may prune the old step first: the rows say.
    store.prune_step_snapshots(now - 60_000).await.expect("prune");
    let kept: Vec<u32> = store.list_step_snapshots(&session.id).await.expect("list").iter().map(|s| s.turn).collect();
    assert_eq!(kept, [1, 2], "the old step goes, the new ones stay");
    let named = store.snapshot_trees(&session.project_id).await.expect("trees");
    assert_eq!(named, ["new-before", "shared"], "the pruned step's trees are no longer named");

    // A pending revert's trees are named while it is pending (an absent one is not).
    let revert = SessionRevert {
        session_id: session.id.clone(),
        owner_id: session.owner_id.clone(),
        message_index: 0,
        ordinal: None,
        state: serde_json::json!({"pre": "revert-pre", "target": "old-before", "report": {}}),
        created_at: now,
    };
    store.put_session_revert(&revert).await.expect("put");
    let named = store.snapshot_trees(&session.project_id).await.expect("trees");
    assert_eq!(named, ["new-before", "old-before", "revert-pre", "shared"]);
    let without_pre = SessionRevert { state: serde_json::json!({"pre": null, "target": null}), ..revert };
    store.put_session_revert(&without_pre).await.expect("replace");
    assert_eq!(store.snapshot_trees(&session.project_id).await.expect("trees"), ["new-before", "shared"]);
    assert_eq!(store.snapshot_trees(&elsewhere.project_id).await.expect("trees"), ["other-project"]);
    for s in [&session, &elsewhere] {
        assert!(store.delete_session(&s.id).await.expect("delete"));
    }
}
