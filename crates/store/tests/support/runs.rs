//! Checks of runs: one per request id, started together with their prompt, updated
//! field by field, failed at start-up only while running, and listed from an index.

use super::fixtures::*;
use spool_engine::{RunInsert, Store, StoreError};
use spool_protocol::*;

pub async fn insert_run_is_idempotent_per_request_id(store: &dyn Store) {
    let (project, session) = new_session(store).await;
    let run = Run {
        user_message_index: 4,
        first_token_at: Some(150),
        usage: Usage { input: 5, output: 6, ..Usage::default() },
        ..run_in(&session, "req-1", RunStatus::Running)
    };
    assert_eq!(store.insert_run(&run).await.expect("insert_run"), RunInsert::Created);
    assert_eq!(store.get_run(&run.id).await.expect("get_run"), Some(run.clone()));
    assert_eq!(store.find_run_by_request(&session.id, "req-1").await.expect("find"), Some(run.clone()));
    assert_eq!(store.find_run_by_request(&session.id, "req-2").await.expect("find"), None);

    // The retry carries a fresh run id; it must get the first run back and write nothing.
    let retry = Run { user_message_index: 9, ..run_in(&session, "req-1", RunStatus::Running) };
    assert_eq!(store.insert_run(&retry).await.expect("insert_run retry"), RunInsert::Existing(run.clone()));
    assert_eq!(store.get_run(&retry.id).await.expect("get_run"), None, "the retry must not be stored");

    // The existing run is returned as it is now, whatever state it reached.
    let finished = Run { status: RunStatus::Completed, ended_at: Some(300), updated_at: 300, ..run.clone() };
    store.update_run(&finished).await.expect("update_run");
    assert_eq!(store.insert_run(&retry).await.expect("insert_run retry"), RunInsert::Existing(finished));

    // The same requestId in another session is another run.
    let other_session = session_in(&project, 2_000, false);
    store.insert_session(&other_session).await.expect("insert_session");
    let elsewhere = run_in(&other_session, "req-1", RunStatus::Running);
    assert_eq!(store.insert_run(&elsewhere).await.expect("insert_run"), RunInsert::Created);
    assert_eq!(store.find_run_by_request(&other_session.id, "req-1").await.expect("find"), Some(elsewhere));
    assert_eq!(store.get_run(&RunId::new()).await.expect("get absent"), None);
}

/// A prompt answered "accepted" is in the store with its run: the two are written in
/// one transaction, so neither can exist without the other.
pub async fn start_run_writes_the_run_and_its_prompt_together(store: &dyn Store) {
    let (_, session) = new_session(store).await;
    let run = run_in(&session, "req-start", RunStatus::Running);
    let prompt = prompt_of(&run, MessageId::new(), "read the README");
    assert_eq!(store.start_run(&run, &prompt).await.expect("start_run"), RunInsert::Created);
    assert_eq!(store.get_run(&run.id).await.expect("get_run"), Some(run.clone()));
    assert_eq!(store.list_messages(&session.id, None, 10).await.expect("list"), vec![prompt.clone()]);

    // A retry gets the first run back and writes neither a run nor a second prompt.
    let retry = Run { user_message_index: 1, ..run_in(&session, "req-start", RunStatus::Running) };
    let retry_prompt = prompt_of(&retry, MessageId::new(), "read the README");
    assert_eq!(store.start_run(&retry, &retry_prompt).await.expect("start_run retry"), RunInsert::Existing(run));
    assert_eq!(store.get_run(&retry.id).await.expect("get_run"), None);
    assert_eq!(store.list_messages(&session.id, None, 10).await.expect("list"), vec![prompt.clone()]);

    // A prompt that cannot be written takes its run with it: no run without its prompt.
    let clash = Run { user_message_index: 0, ..run_in(&session, "req-clash", RunStatus::Running) };
    let clash_prompt = prompt_of(&clash, MessageId::new(), "at a taken index");
    let error = store.start_run(&clash, &clash_prompt).await.expect_err("index 0 is taken");
    assert!(matches!(error, StoreError::Conflict(_)), "{error:?}");
    assert_eq!(store.get_run(&clash.id).await.expect("get_run"), None, "the run was rolled back");
    assert_eq!(store.find_run_by_request(&session.id, "req-clash").await.expect("find"), None);
    assert!(store.delete_session(&session.id).await.expect("delete_session"));
}

pub async fn update_run_writes_the_mutable_fields(store: &dyn Store) {
    let (_, session) = new_session(store).await;
    let run = run_in(&session, "req-update", RunStatus::Running);
    store.insert_run(&run).await.expect("insert_run");

    let interrupted = Run { status: RunStatus::Interrupted, updated_at: 150, first_token_at: Some(120), ..run.clone() };
    store.update_run(&interrupted).await.expect("update_run");
    assert_eq!(store.get_run(&run.id).await.expect("get_run"), Some(interrupted.clone()));

    let failed = Run {
        status: RunStatus::Failed,
        updated_at: 400,
        ended_at: Some(400),
        usage: Usage { input: 1_000, output: 2_000, ..Usage::default() },
        error: Some(RunError { code: "model_error".into(), message: "the model went away".into() }),
        ..interrupted
    };
    store.update_run(&failed).await.expect("update_run");
    assert_eq!(store.get_run(&run.id).await.expect("get_run"), Some(failed.clone()));

    // Clearing optional fields must clear them in storage too.
    let cleared = Run { error: None, first_token_at: None, ended_at: None, status: RunStatus::Running, ..failed };
    store.update_run(&cleared).await.expect("update_run");
    assert_eq!(store.get_run(&run.id).await.expect("get_run"), Some(cleared));
}

pub async fn fail_running_runs_touches_only_running_runs(store: &dyn Store) {
    let crash = RunError { code: "server_restarted".into(), message: "the server restarted during this run".into() };
    // fail_running_runs is global; settle whatever earlier checks (or an earlier pass
    // over the same database) left running, so the count below is exactly ours.
    store.fail_running_runs(&crash, 1, &[]).await.expect("fail_running_runs");

    let (_, session) = new_session(store).await;
    let (_, other_session) = new_session(store).await;
    let running = [run_in(&session, "r1", RunStatus::Running), run_in(&other_session, "r2", RunStatus::Running)];
    let untouched = [
        run_in(&session, "i", RunStatus::Interrupted),
        Run { ended_at: Some(200), ..run_in(&session, "c", RunStatus::Completed) },
        Run {
            ended_at: Some(200),
            error: Some(RunError { code: "earlier".into(), message: "an earlier failure".into() }),
            ..run_in(&session, "f", RunStatus::Failed)
        },
        Run { ended_at: Some(200), ..run_in(&session, "x", RunStatus::Cancelled) },
    ];
    // A run this node still runs, named in `keep`: the one argument the two databases
    // bind differently (an array on PostgreSQL, a JSON list on SQLite).
    let kept = run_in(&session, "k", RunStatus::Running);
    for run in running.iter().chain(&untouched).chain([&kept]) {
        assert_eq!(store.insert_run(run).await.expect("insert_run"), RunInsert::Created);
    }
    let keep = [kept.id.clone(), RunId::new()];

    assert_eq!(store.fail_running_runs(&crash, 5_000, &keep).await.expect("fail_running_runs"), 2);
    for run in &running {
        let expected = Run {
            status: RunStatus::Failed,
            error: Some(crash.clone()),
            updated_at: 5_000,
            ended_at: Some(5_000),
            ..run.clone()
        };
        assert_eq!(store.get_run(&run.id).await.expect("get_run"), Some(expected));
    }
    for run in untouched.iter().chain([&kept]) {
        assert_eq!(
            store.get_run(&run.id).await.expect("get_run").as_ref(),
            Some(run),
            "{:?} must not change",
            run.status
        );
    }
    assert_eq!(
        store.fail_running_runs(&crash, 6_000, &keep).await.expect("fail_running_runs"),
        0,
        "nothing left running but the kept run"
    );
    assert_eq!(store.fail_running_runs(&crash, 7_000, &[]).await.expect("fail_running_runs"), 1, "the kept run");
}

pub async fn runs_since_lists_a_sessions_runs_from_an_index_in_order(store: &dyn Store) {
    let (_, session) = new_session(store).await;
    for (request, index) in [("c", 4u64), ("a", 0), ("b", 2)] {
        let run = Run { user_message_index: index, ..run_in(&session, request, RunStatus::Completed) };
        assert_eq!(store.insert_run(&run).await.expect("insert"), RunInsert::Created);
    }
    let since: Vec<u64> =
        store.runs_since(&session.id, 2).await.expect("runs").iter().map(|r| r.user_message_index).collect();
    assert_eq!(since, [2, 4]);
    assert_eq!(store.runs_since(&session.id, 5).await.expect("runs"), vec![]);
}
