//! Session leases between nodes that share one store, played by two engines in one
//! process over one database file: node A serves HTTP, node B is driven directly. A
//! session running on one node is busy on the other; a dead node's run is failed as
//! `node_lost`, never re-run; a node that loses its lease stops its run (and writes
//! nothing more when another node took the lease over); racing
//! decisions on both nodes run the tool once; queued prompts run once each.
//!
//! Both nodes run on one [`ManualClock`] that only the test moves: a lease expires,
//! is renewed and is reaped exactly when the test says, never because a loaded
//! machine ran a renewal late.

use crate::common;

use common::{Open, TestOptions, TestServer, id_of};
use serde_json::json;
use spool_engine::store::{Messages, Nodes, Queue, Runs};
use spool_engine::{
    DecisionInput, DecisionOutcome, DecisionTarget, Engine, EngineConfig, EngineError, ManualClock, Models, Multitask,
    PromptInput, RunInsert, Submitted,
};
use spool_model::ScriptedModel;
use spool_protocol::*;
use std::sync::Arc;
use std::time::Duration;

/// The lease's lifetime, on the manual clock: renewals come every third of it (1 s),
/// the reapers every half (1.5 s).
const TTL: Duration = Duration::from_secs(3);
const TTL_MS: i64 = 3_000;

fn node_config(name: &str, clock: &ManualClock) -> EngineConfig {
    EngineConfig {
        node_id: name.into(),
        lease_ttl: TTL,
        shared_store: true,
        clock: clock.clone().into(),
        ..EngineConfig::default()
    }
}

/// Node A (with HTTP) and node B (an engine on the same store), both on `clock`.
async fn two_nodes(model_delay: Duration, clock: &ManualClock) -> (TestServer, Engine) {
    let options = TestOptions { engine: node_config("node-a", clock), model_delay, ..TestOptions::default() };
    let a = TestServer::start_with(options).await;
    let models = Models::new(Arc::new(ScriptedModel::new(model_delay)));
    let b = Engine::start(a.store.clone(), models, spool_tools::workspace_tools(), node_config("node-b", clock))
        .await
        .expect("start node B");
    (a, b)
}

/// Starts a run that streams for minutes (100,000 deltas 5 ms apart; the test aborts
/// it) and returns once its first delta is out: the run executes, so its renewals
/// are scheduled from the clock's time now.
async fn start_long_run(a: &TestServer, session: &str) -> String {
    let mut view = a.events(session, Open::fresh()).await;
    view.next_frame().await.expect("snapshot");
    let run = a.start_run(session, "stream: 100000").await;
    view.frames_until(|f| f.event_type() == Some("message_update")).await;
    run
}

/// Polls the store until `session` has no lease.
async fn wait_released(a: &TestServer, session: &SessionId) {
    let deadline = tokio::time::Instant::now() + common::WAIT;
    while let Some(lease) = a.store.get_lease(session).await.expect("lease") {
        assert!(tokio::time::Instant::now() < deadline, "the lease was never given up: {lease:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Polls the store until `session`'s lease satisfies `holds`; returns it.
async fn wait_lease(a: &TestServer, session: &SessionId, holds: impl Fn(&spool_engine::Lease) -> bool) {
    let deadline = tokio::time::Instant::now() + common::WAIT;
    loop {
        let lease = a.store.get_lease(session).await.expect("lease");
        if lease.as_ref().is_some_and(&holds) {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "the lease never got there: {lease:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn prompt(text: &str) -> PromptInput {
    PromptInput { text: text.into(), ..PromptInput::default() }
}

#[tokio::test]
async fn a_session_running_on_one_node_is_busy_on_the_other_until_it_settles() {
    let (a, b) = two_nodes(Duration::from_millis(5), &ManualClock::starting_now()).await;
    let session = a.new_session().await;
    let id: SessionId = session.parse().expect("id");
    let run = a.start_run(&session, "stream: 60").await;
    match b.runs().prompt(b.local_user(), &id, prompt("echo: me too")).await {
        Err(EngineError::SessionBusy(holder)) => assert!(holder.contains("node-a"), "{holder}"),
        other => panic!("node B must answer busy while node A runs the session: {other:?}"),
    }
    assert_eq!(a.wait_run(&run).await["status"], "completed");
    // The run's record settles a moment before its lease is given back.
    wait_released(&a, &id).await;
    let accepted = b.runs().prompt(b.local_user(), &id, prompt("echo: now B")).await.expect("B runs it now");
    let run_b = a.wait_run(accepted.run_id.as_str()).await;
    assert_eq!(run_b["status"], "completed", "{run_b}");
    // A settled run gives its lease up (its record says settled just before).
    wait_released(&a, &id).await;
}

#[tokio::test]
async fn a_dead_nodes_run_is_failed_as_node_lost_at_the_end_of_its_lease_once_and_the_session_works_again() {
    let clock = ManualClock::starting_now();
    let (a, b) = two_nodes(Duration::ZERO, &clock).await;
    let session = a.new_session().await;
    let id: SessionId = session.parse().expect("id");
    // What a node killed mid-run leaves behind: a running run and a lease it no
    // longer renews.
    let taken = clock.now_ms();
    let run = Run {
        id: RunId::new(),
        session_id: id.clone(),
        owner_id: b.local_user().clone(),
        request_id: "req_dead".into(),
        status: RunStatus::Running,
        user_message_index: 0,
        created_at: taken,
        updated_at: taken,
        first_token_at: None,
        ended_at: None,
        usage: Usage::default(),
        error: None,
    };
    assert!(matches!(a.store.insert_run(&run).await.expect("insert"), RunInsert::Created));
    assert!(a.store.acquire_lease(&id, "node-dead", taken, TTL_MS).await.expect("lease").is_some());

    // A millisecond before the lease ends, the node may still be alive: no reaper
    // touches its run, and the session is busy on both nodes.
    clock.advance_to(taken + TTL_MS - 1);
    assert_eq!(a.engine.reap_expired_leases().await.expect("reap") + b.reap_expired_leases().await.expect("reap"), 0);
    let (_, still) = a.get(&format!("/api/runs/{}", run.id)).await;
    assert_eq!(still["status"], "running", "{still}");
    assert_eq!(a.store.get_lease(&id).await.expect("lease").expect("a lease").node_id, "node-dead");
    match b.runs().prompt(b.local_user(), &id, prompt("echo: too early")).await {
        Err(EngineError::SessionBusy(holder)) => assert!(holder.contains("node-dead"), "{holder}"),
        other => panic!("the dead node's lease has 1 ms left: {other:?}"),
    }

    // At its end, the reapers (both nodes' tick every half lease, this instant among
    // them) settle the run: one of them, once.
    clock.advance_to(taken + TTL_MS);
    let seen_on_a = a.wait_run_until(run.id.as_str(), |r| r["status"] != "running").await;
    assert_eq!(seen_on_a["status"], "failed", "{seen_on_a}");
    assert_eq!(seen_on_a["error"]["code"], "node_lost");
    assert!(seen_on_a["error"]["message"].as_str().is_some_and(|m| m.contains("node-dead")), "{seen_on_a}");
    // The reaper marks the run failed, then gives the lease up: wait for the second step.
    wait_released(&a, &id).await;
    assert_eq!(a.engine.reap_expired_leases().await.expect("reap") + b.reap_expired_leases().await.expect("reap"), 0);
    let (_, again) = a.get(&format!("/api/runs/{}", run.id)).await;
    assert_eq!(again, seen_on_a, "settled once, never touched again");
    assert_eq!(a.run_prompt(&session, "echo: alive").await["status"], "completed");
}

#[tokio::test]
async fn the_reapers_leave_a_run_that_renews_its_lease_alone() {
    let clock = ManualClock::starting_now();
    let (a, b) = two_nodes(Duration::from_millis(5), &clock).await;
    let session = a.new_session().await;
    let id: SessionId = session.parse().expect("id");
    let taken = clock.now_ms();
    let run = start_long_run(&a, &session).await;
    wait_lease(&a, &id, |l| l.node_id == "node-a" && l.expires_at == taken + TTL_MS).await;
    // Two lifetimes, a third at a time: at each third the lease is renewed to a whole
    // lifetime from then, so no reaper ever finds it expired.
    for third in 1..=6 {
        clock.advance(TTL / 3);
        let now = clock.now_ms();
        assert_eq!(now, taken + third * TTL_MS / 3);
        wait_lease(&a, &id, |l| l.node_id == "node-a" && l.expires_at == now + TTL_MS).await;
        assert_eq!(b.reap_expired_leases().await.expect("reap"), 0, "at {third} thirds");
        assert_eq!(a.engine.reap_expired_leases().await.expect("reap"), 0, "at {third} thirds");
    }
    let (_, still) = a.get(&format!("/api/runs/{run}")).await;
    assert_eq!(still["status"], "running", "{still}");
    let (status, _) = a.post(&format!("/api/sessions/{session}/abort"), serde_json::Value::Null).await;
    assert_eq!(status, reqwest::StatusCode::OK);
    let settled = a.wait_run(&run).await;
    assert_eq!(settled["status"], "cancelled", "stopped by the abort, not by a lost lease: {settled}");
}

#[tokio::test]
async fn a_node_that_loses_its_lease_stops_its_run_as_lease_lost_at_its_next_renewal() {
    let clock = ManualClock::starting_now();
    let (a, _b) = two_nodes(Duration::from_millis(5), &clock).await;
    let session = a.new_session().await;
    let id: SessionId = session.parse().expect("id");
    let run = start_long_run(&a, &session).await;
    // As if the store had been out of reach for a whole lease: the lease ran out
    // unrenewed (its own taking, ended now), and nobody took it over yet. Node A learns
    // it at its next renewal, before any reaper's pass, and settles the run itself: its
    // lease is still its own taking, so the settling goes through the fence.
    let ended = clock.now_ms() - TTL_MS;
    assert!(a.store.acquire_lease(&id, "node-a", ended, TTL_MS).await.expect("the same taking").is_some());
    clock.advance(TTL / 3);
    let settled = a.wait_run(&run).await;
    assert_eq!(settled["status"], "failed", "{settled}");
    assert_eq!(settled["error"]["code"], "lease_lost");
    wait_released(&a, &id).await;
}

/// Another node took the lease over (it declared node A dead): A's run stops at A's
/// next renewal and writes nothing more — no `lease_lost`, no message, no lease given
/// back: the run is the new holder's to settle, which it does as for any lost node.
/// (What clients see is `crates/cli/tests/pauses.rs`'s, with a frame bus.)
#[tokio::test]
async fn a_node_whose_lease_was_taken_over_stops_its_run_without_a_trace() {
    let clock = ManualClock::starting_now();
    let (a, b) = two_nodes(Duration::from_millis(5), &clock).await;
    let session = a.new_session().await;
    let id: SessionId = session.parse().expect("id");
    let run = start_long_run(&a, &session).await;
    assert!(a.store.release_lease(&id, "node-a").await.expect("release"));
    assert!(a.store.acquire_lease(&id, "node-c", clock.now_ms(), TTL_MS).await.expect("take over").is_some());
    // A learns it at its next renewal, a third of a lease after it took the lease, and
    // stops: the session is free on A again, and busy only by node C's lease.
    clock.advance(TTL / 3);
    let deadline = tokio::time::Instant::now() + common::WAIT;
    loop {
        match a.engine.runs().prompt(a.engine.local_user(), &id, prompt("echo: too early")).await {
            Err(EngineError::SessionBusy(holder)) if holder.contains("node-c") => break,
            Err(EngineError::SessionBusy(_)) => {}
            other => panic!("node C holds the session: {other:?}"),
        }
        assert!(tokio::time::Instant::now() < deadline, "node A never let the run go");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (_, still) = a.get(&format!("/api/runs/{run}")).await;
    assert_eq!(still["status"], "running", "A settles nothing it lost: {still}");
    let lease = a.store.get_lease(&id).await.expect("lease").expect("still node C's");
    assert_eq!(lease.node_id, "node-c", "the stopped run does not release a lease it no longer holds");
    assert_eq!(a.store.count_messages(&id).await.expect("count"), 1, "only the prompt, no answer committed");

    // Node C never comes back: at the end of its lease the reapers settle the run as
    // they settle any lost node's, once.
    clock.advance(TTL);
    let settled = a.wait_run(&run).await;
    assert_eq!((settled["status"].as_str(), settled["error"]["code"].as_str()), (Some("failed"), Some("node_lost")));
    assert!(settled["error"]["message"].as_str().is_some_and(|m| m.contains("node-c")), "{settled}");
    drop(b);
}

#[tokio::test]
async fn racing_decisions_on_two_nodes_run_the_tool_once() {
    let (a, b) = two_nodes(Duration::ZERO, &ManualClock::starting_now()).await;
    let session = a.new_session().await;
    let id: SessionId = session.parse().expect("id");
    let prompt = format!("tool: bash {}", json!({"command": "echo ran >> effects.txt"}));
    let run = a.start_run(&session, &prompt).await;
    assert_eq!(a.wait_run_until(&run, |r| r["status"] != "running").await["status"], "interrupted");
    let (_, detail) = a.get(&format!("/api/sessions/{session}")).await;
    let approval = id_of(&detail["state"]["pendingApprovals"][0]);
    let approval_id: ApprovalId = approval.parse().expect("approval id");

    let mut racers = Vec::new();
    for i in 0..24 {
        if i % 2 == 0 {
            let request = a
                .client
                .post(a.url(&format!("/api/sessions/{session}/approvals/{approval}")))
                .json(&json!({"decision": "once"}));
            racers.push(tokio::spawn(async move { request.send().await.expect("decide").status().as_u16() }));
        } else {
            let (b, id, approval_id) = (b.clone(), id.clone(), approval_id.clone());
            racers.push(tokio::spawn(async move {
                let input = DecisionInput::plain(Decision::Once);
                match b.runs().decide(b.local_user(), DecisionTarget::Session(id), &approval_id, input).await {
                    Ok(DecisionOutcome::Applied { .. }) => 200,
                    Ok(_) => 409,
                    // Node A ran the continuation before node B even looked.
                    Err(EngineError::SessionBusy(_)) => 409,
                    Err(e) => panic!("node B: {e}"),
                }
            }));
        }
    }
    let mut statuses = Vec::new();
    for racer in racers {
        statuses.push(racer.await.expect("racer"));
    }
    assert_eq!(statuses.iter().filter(|s| **s == 200).count(), 1, "one winner: {statuses:?}");
    assert!(statuses.iter().all(|s| *s == 200 || *s == 409), "the others are told no: {statuses:?}");
    assert_eq!(a.wait_run_until(&run, |r| r["status"] != "running").await["status"], "completed");
    let effects = std::fs::read_to_string(a.project_dir().join("effects.txt")).expect("the tool ran");
    assert_eq!(effects, "ran\n", "the side effect happened exactly once");
}

#[tokio::test]
async fn a_node_reads_what_another_node_wrote_to_a_session_it_had_loaded() {
    let (a, b) = two_nodes(Duration::ZERO, &ManualClock::starting_now()).await;
    let session = a.new_session().await;
    let id: SessionId = session.parse().expect("id");
    let before = b.sessions().get(b.local_user(), &id).await.expect("B loads it");
    assert_eq!(before.state.total, 0);
    assert_eq!(a.run_prompt(&session, "echo: written on A").await["status"], "completed");
    let (status, _) = a.patch(&format!("/api/sessions/{session}"), json!({"title": "renamed on A"})).await;
    assert_eq!(status, reqwest::StatusCode::OK);
    let after = b.sessions().get(b.local_user(), &id).await.expect("B reads it again");
    assert_eq!(after.state.total, 2, "B shows A's run");
    assert_eq!(after.session.title, "renamed on A");
    assert_eq!(after.state.messages.last().map(|m| m.message.text()), Some("written on A".into()));
}

/// A prompt queued on the node that does not run the session waits; the runner takes
/// the queue when its run settles. Each runs once, in order.
#[tokio::test]
async fn prompts_queued_on_either_node_run_once_each_in_order() {
    let (a, b) = two_nodes(Duration::from_millis(5), &ManualClock::starting_now()).await;
    let session = a.new_session().await;
    let id: SessionId = session.parse().expect("id");
    let run = a.start_run(&session, "stream: 60").await;
    let on_b =
        PromptInput { multitask: Multitask::Enqueue, request_id: Some("on-b".into()), ..prompt("echo: queued on B") };
    match b.runs().submit(b.local_user(), &id, on_b).await.expect("B queues it") {
        Submitted::Queued(queued) => assert_eq!(queued.position, 1),
        other => panic!("node A runs the session; B must queue: {other:?}"),
    }
    let (status, on_a) = a
        .post(
            &format!("/api/sessions/{session}/prompt"),
            json!({"text": "echo: queued on A", "requestId": "on-a", "queue": true}),
        )
        .await;
    assert_eq!((status, on_a["position"].clone()), (reqwest::StatusCode::ACCEPTED, json!(2)), "{on_a}");
    assert_eq!(a.wait_run(&run).await["status"], "completed");

    let deadline = tokio::time::Instant::now() + common::WAIT;
    let runs = loop {
        let runs = a.store.runs_since(&id, 0).await.expect("runs");
        let queue = a.store.queued_prompts(&id).await.expect("queue");
        if queue.is_empty() && runs.len() == 3 && runs.iter().all(|r| r.status.is_terminal()) {
            break runs;
        }
        assert!(tokio::time::Instant::now() < deadline, "the queue did not run: {runs:?} {queue:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let requests: Vec<&str> = runs.iter().skip(1).map(|r| r.request_id.as_str()).collect();
    assert_eq!(requests, ["on-b", "on-a"], "in the order they were queued, each once");
    assert!(runs.iter().all(|r| r.status == RunStatus::Completed), "{runs:?}");
    let history = a.messages(&session, "?limit=500").await;
    let prompts: Vec<&str> = (history["messages"].as_array().expect("messages").iter())
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"][0]["text"].as_str().expect("text"))
        .collect();
    assert_eq!(prompts, ["stream: 60", "echo: queued on B", "echo: queued on A"]);
}
