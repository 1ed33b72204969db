//! Double-texting (issue 40): what a prompt sent while a run is going does, per its
//! `multitask`, told by what the store holds afterwards — the runs' statuses, the
//! session's history and its branches. `reject` changes nothing; `enqueue` waits and
//! runs after; `interrupt` cancels the run, keeping its partial answer, and runs after
//! it; `rollback` cancels it, shelves its turn as a `rollback` branch and takes the
//! turn's place, so the model never sees it again; a retried interrupt (same requestId)
//! starts and cancels nothing twice; an interrupting prompt starts ahead of the queue;
//! a run parked at an approval is interrupted with its approval.
//!
//! The first run's model answers a little and then waits forever, so the run is going
//! for as long as a test wants; the model says when it has streamed its partial answer,
//! and every wait is on that or on a run's stored status.

use crate::common;

use async_trait::async_trait;
use common::{ModelsOverride, TestOptions, TestServer, id_of, message_rows};
use futures::StreamExt;
use reqwest::StatusCode;
use serde_json::{Value, json};
use spool_engine::{Model, ModelError, ModelEvent, ModelRequest, ModelStream, Models};
use spool_model::ScriptedModel;
use spool_protocol::{Message, StopReason};
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;

/// The prompt the hanging model answers with [`PARTIAL`] and then nothing more.
const HANGS: &str = "hang: keep going";
/// What the hanging run has said when it is interrupted.
const PARTIAL: &str = "partial answer";

/// The scripted model, keeping every chat request it was sent; a last user message
/// starting `hang:` is answered with [`PARTIAL`], then `streamed` is notified and the
/// answer goes on only when `release` is (or the run is cancelled): then it stops.
struct Hanging {
    inner: ScriptedModel,
    seen: Arc<Mutex<Vec<ModelRequest>>>,
    streamed: Arc<Notify>,
    release: Arc<Notify>,
}

#[async_trait]
impl Model for Hanging {
    fn name(&self) -> String {
        "hanging".into()
    }
    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, ModelError> {
        if request.tools.is_empty() {
            return self.inner.stream(request).await;
        }
        self.seen.lock().expect("lock").push(request.clone());
        let hangs = request.messages.last().is_some_and(|m| m.is_user() && m.text().starts_with("hang:"));
        if !hangs {
            return self.inner.stream(request).await;
        }
        let (streamed, release) = (self.streamed.clone(), self.release.clone());
        // The notice is sent when the engine asks for the event after the text: it
        // has taken the partial answer by then.
        let after = futures::stream::once(async move {
            streamed.notify_one();
            release.notified().await;
            Ok(ModelEvent::Stop(StopReason::Stop))
        });
        Ok(futures::stream::iter([Ok(ModelEvent::Text(PARTIAL.into()))]).chain(after).boxed())
    }
}

struct Harness {
    server: TestServer,
    session: String,
    seen: Arc<Mutex<Vec<ModelRequest>>>,
    streamed: Arc<Notify>,
    release: Arc<Notify>,
}

async fn harness() -> Harness {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (streamed, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let model = Arc::new(Hanging {
        inner: ScriptedModel::default(),
        seen: seen.clone(),
        streamed: streamed.clone(),
        release: release.clone(),
    });
    let options = TestOptions { models: Some(ModelsOverride(Models::new(model))), ..TestOptions::default() };
    let server = TestServer::start_with(options).await;
    let project = server.default_project().await;
    let session = id_of(&server.create_session(&project, Some("double-texting")).await);
    Harness { server, session, seen, streamed, release }
}

impl Harness {
    /// Starts a run that answers [`PARTIAL`] and then keeps going; returns its id once
    /// the partial answer is in.
    async fn start_hanging(&self) -> String {
        let run = self.server.start_run(&self.session, HANGS).await;
        tokio::time::timeout(common::WAIT, self.streamed.notified())
            .await
            .expect("the model streams its partial answer");
        run
    }

    async fn prompt(&self, body: Value) -> (StatusCode, Value) {
        self.server.post(&format!("/api/sessions/{}/prompt", self.session), body).await
    }

    /// Every run of the session, oldest first: (run id, request id, status).
    async fn runs(&self) -> Vec<(String, String, String)> {
        let (status, runs) = self.server.get(&format!("/api/sessions/{}/runs", self.session)).await;
        assert_eq!(status, StatusCode::OK, "{runs}");
        let text = |r: &Value, field: &str| r[field].as_str().unwrap_or_else(|| panic!("{field} in {r}")).to_owned();
        let runs = runs.as_array().expect("a list").clone();
        runs.iter().map(|r| (text(r, "id"), text(r, "requestId"), text(r, "status"))).collect()
    }

    /// The statuses of the session's runs, oldest first.
    async fn statuses(&self) -> Vec<String> {
        self.runs().await.into_iter().map(|r| r.2).collect()
    }

    /// The active path's messages: (index, role, text).
    async fn history(&self) -> Vec<(u64, String, String)> {
        message_rows(&self.server.messages(&self.session, "?limit=500").await)
    }

    async fn branches(&self) -> Vec<Value> {
        let (status, branches) = self.server.get(&format!("/api/sessions/{}/branches", self.session)).await;
        assert_eq!(status, StatusCode::OK, "{branches}");
        branches.as_array().expect("a list").clone()
    }

    /// The text of every message of the model's last chat request.
    fn last_request(&self) -> Vec<String> {
        self.seen.lock().expect("lock").last().expect("a chat request").messages.iter().map(Message::text).collect()
    }
}

fn rows(rows: &[(u64, &str, &str)]) -> Vec<(u64, String, String)> {
    rows.iter().map(|(i, role, text)| (*i, role.to_string(), text.to_string())).collect()
}

fn run_id(answer: &Value) -> &str {
    answer["runId"].as_str().unwrap_or_else(|| panic!("a started run: {answer}"))
}

#[tokio::test]
async fn reject_answers_409_and_leaves_the_going_run_and_the_history_as_they_were() {
    let h = harness().await;
    let first = h.start_hanging().await;
    let before = h.history().await;

    let (status, body) = h.prompt(json!({"text": "echo: second", "multitask": "reject", "requestId": "r2"})).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"]["code"], "session_busy", "{body}");
    // Left out, it is the same.
    let (status, body) = h.prompt(json!({"text": "echo: third"})).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");

    assert_eq!(h.statuses().await, ["running"], "nothing new was stored and the first run goes on");
    assert_eq!(h.history().await, before);
    assert!(h.branches().await.is_empty());
    // And it ends as it would have.
    h.release.notify_one();
    assert_eq!(h.server.wait_run(&first).await["status"], "completed");
    assert_eq!(h.statuses().await, ["completed"]);
}

#[tokio::test]
async fn enqueue_waits_for_the_going_run_and_runs_after_it() {
    let h = harness().await;
    let first = h.start_hanging().await;

    let (status, body) = h.prompt(json!({"text": "echo: queued one", "multitask": "enqueue", "requestId": "q1"})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!((body["queued"].clone(), body["position"].clone()), (json!(true), json!(1)), "{body}");
    // `queue: true` says the same; beside another strategy it is refused.
    let (status, body) = h.prompt(json!({"text": "echo: no", "multitask": "interrupt", "queue": true})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(h.statuses().await, ["running"], "the queued prompt waits");

    h.release.notify_one();
    assert_eq!(h.server.wait_run(&first).await["status"], "completed");
    let queued = wait_nth_run(&h, 1).await;
    assert_eq!(h.server.wait_run(&queued).await["status"], "completed");
    let runs = h.runs().await;
    assert_eq!(runs.iter().map(|r| (r.1.as_str(), r.2.as_str())).collect::<Vec<_>>()[1], ("q1", "completed"));
    assert_eq!(
        h.history().await,
        rows(&[
            (0, "user", HANGS),
            (1, "assistant", PARTIAL),
            (2, "user", "echo: queued one"),
            (3, "assistant", "queued one")
        ])
    );
}

/// The id of the session's run number `n` (from 0), once a run took the queued prompt.
async fn wait_nth_run(h: &Harness, n: usize) -> String {
    let deadline = tokio::time::Instant::now() + common::WAIT;
    loop {
        if let Some(run) = h.runs().await.get(n) {
            return run.0.clone();
        }
        assert!(tokio::time::Instant::now() < deadline, "no run {n}: {:?}", h.runs().await);
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn interrupt_cancels_the_going_run_keeping_its_partial_answer_and_the_new_prompt_runs_after_it() {
    let h = harness().await;
    let first = h.start_hanging().await;

    let (status, body) = h.prompt(json!({"text": "echo: instead", "multitask": "interrupt", "requestId": "i1"})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let second = run_id(&body).to_owned();
    assert_ne!(second, first);
    // The first run is settled by the time the answer comes.
    let (_, stored) = h.server.get(&format!("/api/runs/{first}")).await;
    assert_eq!(stored["status"], "cancelled", "{stored}");
    assert_eq!(h.server.wait_run(&second).await["status"], "completed");

    assert_eq!(h.statuses().await, ["cancelled", "completed"]);
    assert_eq!(
        h.history().await,
        rows(&[
            (0, "user", HANGS),
            (1, "assistant", PARTIAL),
            (2, "user", "echo: instead"),
            (3, "assistant", "instead")
        ])
    );
    assert!(h.branches().await.is_empty(), "nothing left the path");
    assert_eq!(h.last_request(), [HANGS, PARTIAL, "echo: instead"], "the model sees what the first run said");
}

#[tokio::test]
async fn a_retried_interrupt_answers_the_same_run_and_cancels_nothing_more() {
    let h = harness().await;
    h.start_hanging().await;
    let body = json!({"text": HANGS, "multitask": "interrupt", "requestId": "twice"});
    let (status, answer) = h.prompt(body.clone()).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    let second = run_id(&answer).to_owned();
    // The second run hangs too: a retry that interrupted again would cancel it.
    tokio::time::timeout(common::WAIT, h.streamed.notified()).await.expect("the second run streams");

    // A double click, and a retry after it.
    let (a, b) = tokio::join!(h.prompt(body.clone()), h.prompt(body.clone()));
    for (status, again) in [a, b] {
        assert_eq!(status, StatusCode::ACCEPTED, "{again}");
        assert_eq!(run_id(&again), second, "the same requestId answers the same run");
    }
    assert_eq!(h.statuses().await, ["cancelled", "running"], "the second run goes on");
    h.release.notify_one();
    assert_eq!(h.server.wait_run(&second).await["status"], "completed");
    assert_eq!(h.statuses().await, ["cancelled", "completed"]);
    let users: Vec<_> = h.history().await.into_iter().filter(|r| r.1 == "user").collect();
    assert_eq!(users.len(), 2, "one user message a run: {users:?}");
}

#[tokio::test]
async fn rollback_cancels_the_going_run_and_takes_its_turn_off_the_path() {
    let h = harness().await;
    // A finished turn first: the rollback takes only the going run's turn.
    let (status, body) = h.prompt(json!({"text": "echo: hello"})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    h.server.wait_run(run_id(&body)).await;
    let first = h.start_hanging().await;

    let (status, body) = h.prompt(json!({"text": "echo: instead", "multitask": "rollback", "requestId": "rb"})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let second = run_id(&body).to_owned();
    assert_eq!(h.server.wait_run(&second).await["status"], "completed");
    let (_, stored) = h.server.get(&format!("/api/runs/{first}")).await;
    assert_eq!(stored["status"], "cancelled", "{stored}");

    assert_eq!(h.statuses().await, ["completed", "cancelled", "completed"]);
    assert_eq!(
        h.history().await,
        rows(&[
            (0, "user", "echo: hello"),
            (1, "assistant", "hello"),
            (2, "user", "echo: instead"),
            (3, "assistant", "instead")
        ]),
        "the new prompt took the rolled-back turn's index"
    );
    let branches = h.branches().await;
    assert_eq!(branches.len(), 1, "{branches:?}");
    assert_eq!((branches[0]["kind"].clone(), branches[0]["forkIndex"].clone()), (json!("rollback"), json!(2)));
    assert_eq!(branches[0]["preview"], HANGS);
    assert_eq!(
        h.last_request(),
        ["echo: hello", "hello", "echo: instead"],
        "the model never sees the rolled-back turn"
    );
}

#[tokio::test]
async fn interrupt_and_rollback_on_an_idle_session_just_start() {
    let h = harness().await;
    for (n, strategy) in ["interrupt", "rollback"].into_iter().enumerate() {
        let (status, body) = h.prompt(json!({"text": format!("echo: idle {n}"), "multitask": strategy})).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        assert_eq!(h.server.wait_run(run_id(&body)).await["status"], "completed");
    }
    assert_eq!(h.statuses().await, ["completed", "completed"]);
    assert_eq!(h.history().await.len(), 4);
    assert!(h.branches().await.is_empty(), "nothing was going, so nothing was rolled back");
}

#[tokio::test]
async fn an_interrupting_prompt_starts_ahead_of_the_queue_and_the_queue_goes_on_after_it() {
    let h = harness().await;
    h.start_hanging().await;
    let (status, body) = h.prompt(json!({"text": "echo: queued", "multitask": "enqueue", "requestId": "q"})).await;
    assert_eq!((status, body["queued"].clone()), (StatusCode::ACCEPTED, json!(true)), "{body}");

    let (status, body) = h.prompt(json!({"text": "echo: now", "multitask": "interrupt", "requestId": "now"})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(h.server.wait_run(run_id(&body)).await["status"], "completed");
    let queued = h.server.wait_run(&wait_nth_run(&h, 2).await).await;
    assert_eq!(queued["status"], "completed", "{queued}");

    let runs = h.runs().await;
    let order: Vec<_> = runs.iter().skip(1).map(|r| (r.1.as_str(), r.2.as_str())).collect();
    assert_eq!(order, [("now", "completed"), ("q", "completed")]);
    assert_eq!(runs[0].2, "cancelled");
    let users: Vec<_> = h.history().await.into_iter().filter(|r| r.1 == "user").map(|r| r.2).collect();
    assert_eq!(users, [HANGS, "echo: now", "echo: queued"]);
}

#[tokio::test]
async fn interrupting_a_run_parked_at_an_approval_cancels_the_approval_too() {
    let h = harness().await;
    let parks = r#"tool: write {"path": "a.txt", "content": "x"}"#;
    let first = h.server.start_run(&h.session, parks).await;
    h.server.wait_run_until(&first, |run| run["status"] == "interrupted").await;
    let (status, pending) = h.server.get("/api/gate/approvals").await;
    assert_eq!((status, pending["approvals"].as_array().map(Vec::len)), (StatusCode::OK, Some(1)), "{pending}");

    let (status, body) = h.prompt(json!({"text": "echo: never mind", "multitask": "interrupt"})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(h.server.wait_run(run_id(&body)).await["status"], "completed");

    assert_eq!(h.statuses().await, ["cancelled", "completed"]);
    let (_, pending) = h.server.get("/api/gate/approvals").await;
    assert_eq!(pending["approvals"], json!([]), "no approval waits for a cancelled run");
    assert!(!h.server.project_dir().join("a.txt").exists(), "the parked call never ran");
    let users: Vec<_> = h.history().await.into_iter().filter(|r| r.1 == "user").map(|r| r.2).collect();
    assert_eq!(users, [parks, "echo: never mind"]);
}
