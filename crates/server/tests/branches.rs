//! Branches (issue 39): a prompt with `at` edits a turn (or with `regenerate` answers it
//! again) and the turns it replaces become a branch; the model's next request holds the
//! active path only; `POST /api/sessions/{id}/branch` switches versions and every open
//! view is sent the new state; a shelved branch reads back by its ordinal.

use crate::common;

use async_trait::async_trait;
use common::{ModelsOverride, Open, TestOptions, TestServer, message_rows};
use reqwest::StatusCode;
use serde_json::{Value, json};
use spool_engine::{Model, ModelError, ModelRequest, ModelStream, Models};
use spool_model::ScriptedModel;
use spool_protocol::{Message, VariantSet};
use std::sync::{Arc, Mutex};

/// The scripted model, keeping every chat request it was sent, whose answer to a plain
/// prompt is numbered ("answer 1", "answer 2", …), so two answers to one prompt differ.
/// (Script directives such as `tool:`, the turns after a tool result, titles and other
/// calls without tools go to the script unchanged.)
struct Numbered {
    inner: ScriptedModel,
    seen: Arc<Mutex<Vec<ModelRequest>>>,
}

#[async_trait]
impl Model for Numbered {
    fn name(&self) -> String {
        "numbered".into()
    }
    async fn stream(&self, mut request: ModelRequest) -> Result<ModelStream, ModelError> {
        if request.tools.is_empty() {
            return self.inner.stream(request).await;
        }
        let n = {
            let mut seen = self.seen.lock().expect("lock");
            seen.push(request.clone());
            seen.len()
        };
        let plain = request.messages.last().is_some_and(|m| m.is_user() && !m.text().contains(':'));
        if plain {
            request.messages.push(Message::user_text(format!("echo: answer {n}"), 0));
        }
        self.inner.stream(request).await
    }
}

async fn numbered_server() -> (TestServer, Arc<Mutex<Vec<ModelRequest>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let model = Arc::new(Numbered { inner: ScriptedModel::default(), seen: seen.clone() });
    let options = TestOptions { models: Some(ModelsOverride(Models::new(model))), ..TestOptions::default() };
    (TestServer::start_with(options).await, seen)
}

fn said(rows: &[(u64, &str, &str)]) -> Vec<(u64, String, String)> {
    rows.iter().map(|(i, role, text)| (*i, role.to_string(), text.to_string())).collect()
}

/// The text of every message of the model's last chat request.
fn last_request(seen: &Mutex<Vec<ModelRequest>>) -> Vec<String> {
    seen.lock().expect("lock").last().expect("a chat request").messages.iter().map(Message::text).collect()
}

/// `POST /api/sessions/:id/prompt` with `extra` fields; waits for the run when one starts.
async fn prompt_with(server: &TestServer, session: &str, body: Value) -> (StatusCode, Value) {
    let (status, answer) = server.post(&format!("/api/sessions/{session}/prompt"), body).await;
    if status == StatusCode::ACCEPTED {
        let run = server.wait_run(answer["runId"].as_str().expect("runId")).await;
        assert_eq!(run["status"], "completed", "{run}");
    }
    (status, answer)
}

async fn variants(server: &TestServer, session: &str) -> Vec<VariantSet> {
    let (status, detail) = server.get(&format!("/api/sessions/{session}")).await;
    assert_eq!(status, StatusCode::OK, "{detail}");
    serde_json::from_value(detail["state"]["variants"].clone()).unwrap_or_default()
}

#[tokio::test]
async fn an_edited_turn_is_a_branch_and_the_next_model_request_holds_only_the_active_path() {
    let (server, seen) = numbered_server().await;
    let session = server.new_session().await;
    server.run_prompt(&session, "first question").await;
    server.run_prompt(&session, "second question").await;
    let before = server.messages(&session, "").await;
    assert_eq!(
        message_rows(&before),
        said(&[
            (0, "user", "first question"),
            (1, "assistant", "answer 1"),
            (2, "user", "second question"),
            (3, "assistant", "answer 2")
        ])
    );

    let (status, answer) = prompt_with(&server, &session, json!({"text": "second, edited", "at": 2})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    assert_eq!(
        last_request(&seen),
        ["first question", "answer 1", "second, edited"],
        "the model sees the path up to the edit and the new text, not the replaced turn"
    );
    let after = server.messages(&session, "").await;
    assert_eq!(
        message_rows(&after),
        said(&[
            (0, "user", "first question"),
            (1, "assistant", "answer 1"),
            (2, "user", "second, edited"),
            (3, "assistant", "answer 3")
        ])
    );
    assert_eq!(after["total"], 4);

    let (status, branches) = server.get(&format!("/api/sessions/{session}/branches")).await;
    assert_eq!(status, StatusCode::OK, "{branches}");
    assert_eq!(branches.as_array().expect("list").len(), 1, "{branches}");
    assert_eq!(branches[0]["ordinal"], 1);
    assert_eq!(branches[0]["forkIndex"], 2);
    assert_eq!(branches[0]["kind"], "edit");
    assert_eq!(branches[0]["preview"], "second question");
    assert_eq!(
        variants(&server, &session).await,
        [VariantSet { index: 2, position: 2, versions: vec![Some(1), None] }],
        "the edited turn shows ‹ 2/2 ›"
    );

    // A prompt after the edit goes on from the new path only.
    server.run_prompt(&session, "third question").await;
    assert_eq!(last_request(&seen), ["first question", "answer 1", "second, edited", "answer 3", "third question"]);
}

#[tokio::test]
async fn regenerate_makes_a_version_and_switching_shows_the_other_answer() {
    let (server, seen) = numbered_server().await;
    let session = server.new_session().await;
    server.run_prompt(&session, "tell me a joke").await;
    let first = server.messages(&session, "").await;

    // No text: the turn's own prompt is asked again.
    let (status, answer) = prompt_with(&server, &session, json!({"text": "", "at": 0, "regenerate": true})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    assert_eq!(last_request(&seen), ["tell me a joke"], "the model is asked the same prompt alone");
    assert_eq!(
        message_rows(&server.messages(&session, "").await),
        said(&[(0, "user", "tell me a joke"), (1, "assistant", "answer 2")])
    );
    assert_eq!(
        variants(&server, &session).await,
        [VariantSet { index: 0, position: 2, versions: vec![Some(1), None] }]
    );
    let (_, branches) = server.get(&format!("/api/sessions/{session}/branches")).await;
    assert_eq!(branches[0]["kind"], "regenerate", "{branches}");

    // Switching back, with a view open: it is sent the first answer's state.
    let mut view = server.events(&session, Open::fresh()).await;
    let snapshot = view.next_frame().await.expect("snapshot");
    assert_eq!(snapshot.kind, "session.snapshot");
    let (status, state) = server.post(&format!("/api/sessions/{session}/branch"), json!({"ordinal": 1})).await;
    assert_eq!(status, StatusCode::OK, "{state}");
    assert_eq!(message_rows(&state), message_rows(&first), "the answer is the first one again");
    let versions = vec![None, Some(2)];
    assert_eq!(state["variants"], json!([{"index": 0, "position": 1, "versions": versions}]));
    let redrawn = view.frames_until(|f| f.kind == "session.state").await.pop().expect("a state frame");
    let shown = redrawn.state();
    assert_eq!(shown.messages.iter().map(|m| m.message.text()).collect::<Vec<_>>(), ["tell me a joke", "answer 1"]);
    assert_eq!(shown.variants, [VariantSet { index: 0, position: 1, versions: vec![None, Some(2)] }]);

    assert_eq!(server.messages(&session, "").await, first, "the history is the first version, ids and all");
    let (_, branches) = server.get(&format!("/api/sessions/{session}/branches")).await;
    assert_eq!(branches.as_array().expect("list").len(), 1, "{branches}");
    assert_eq!((branches[0]["ordinal"].clone(), branches[0]["kind"].clone()), (json!(2), json!("switch")));

    // And the model's next request holds the version shown.
    server.run_prompt(&session, "another").await;
    assert_eq!(last_request(&seen), ["tell me a joke", "answer 1", "another"]);
}

#[tokio::test]
async fn a_busy_session_refuses_an_edit_with_409() {
    let (server, _) = numbered_server().await;
    let session = server.new_session().await;
    server.run_prompt(&session, "first").await;
    let (run, _) = server.park(&session, "tool: bash {\"command\": \"echo hi\"}").await;
    let before = server.messages(&session, "").await;

    let (status, body) = server.post(&format!("/api/sessions/{session}/prompt"), json!({"text": "x", "at": 0})).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"]["code"], "session_busy");
    let (status, body) = server.post(&format!("/api/sessions/{session}/branch"), json!({"ordinal": 1})).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"]["code"], "session_busy");
    assert_eq!(server.messages(&session, "").await, before, "nothing moved");
    let (_, branches) = server.get(&format!("/api/sessions/{session}/branches")).await;
    assert_eq!(branches, json!([]));
    let (_, parked) = server.get(&format!("/api/runs/{run}")).await;
    assert_eq!(parked["status"], "interrupted", "the parked run waits on");

    // `at` cannot wait in the queue, and must name a user message.
    let (status, body) =
        server.post(&format!("/api/sessions/{session}/prompt"), json!({"text": "x", "at": 0, "queue": true})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let quiet = server.new_session().await;
    server.run_prompt(&quiet, "hello").await;
    let (status, body) = server.post(&format!("/api/sessions/{quiet}/prompt"), json!({"text": "x", "at": 1})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["error"]["code"], "invalid_index");
}

#[tokio::test]
async fn a_shelved_branch_reads_back_by_ordinal() {
    let (server, _) = numbered_server().await;
    let session = server.new_session().await;
    server.run_prompt(&session, "one").await;
    server.run_prompt(&session, "two").await;
    let before = server.messages(&session, "").await;
    prompt_with(&server, &session, json!({"text": "one, edited", "at": 0})).await;

    let shelved = server.messages(&session, "?branch=1").await;
    assert_eq!(shelved["messages"], before["messages"], "every turn from the edit on, ids and content as they were");
    assert_eq!(shelved["total"], 4);
    let last = server.messages(&session, "?branch=1&limit=1").await;
    assert_eq!(message_rows(&last), said(&[(3, "assistant", "answer 2")]), "pages like the history");
    let earlier = server.messages(&session, "?branch=1&before=2").await;
    assert_eq!(message_rows(&earlier), said(&[(0, "user", "one"), (1, "assistant", "answer 1")]));

    let (status, body) = server.get(&format!("/api/sessions/{session}/messages?branch=7")).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let (status, body) = server.post(&format!("/api/sessions/{session}/branch"), json!({"ordinal": 7})).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
}
