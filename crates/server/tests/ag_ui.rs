//! The AG-UI endpoint through a real server on a real port: `POST /api/ag-ui` with a
//! `RunAgentInput` answers AG-UI events as SSE, from `RUN_STARTED` (the Spool run's
//! id) to `RUN_FINISHED`; a thread id names one session; the same user message again
//! follows the run it started; an approval ends the stream with an `interrupt` outcome
//! and the request answering it (`resume`) streams the rest of the run, the decision
//! taken once; a request that goes away mid-run leaves its run going (unless it asked
//! otherwise), and the client re-attaches after the last event it has; a call of a
//! tool the client declared ends the stream with the call pending, and the request
//! with its `tool` message goes on from its result, taken once.

use crate::common;

use common::{SseStream, TestOptions, TestServer, WAIT};
use reqwest::StatusCode;
use serde_json::{Value, json};
use spool_engine::{EngineConfig, ManualClock};

fn input(thread: &str, project: &str, messages: Value) -> Value {
    json!({
        "threadId": thread,
        "runId": "client-run",
        "messages": messages,
        "tools": [],
        "context": [],
        "state": {},
        "forwardedProps": {"projectId": project},
    })
}

fn user(id: &str, text: &str) -> Value {
    json!({"id": id, "role": "user", "content": text})
}

async fn post(server: &TestServer, body: &Value) -> reqwest::Response {
    let request = server.client.post(server.url("/api/ag-ui")).json(body).send();
    tokio::time::timeout(WAIT, request).await.expect("answers in time").expect("request")
}

/// Every event of a stream that must end by itself, as JSON.
async fn events(res: reqwest::Response) -> Vec<Value> {
    assert_eq!(res.status(), StatusCode::OK);
    let mut stream = SseStream::new(res);
    assert_eq!(stream.header("content-type"), "text/event-stream");
    let mut out = Vec::new();
    while let Some(event) = stream.next_event().await {
        assert_eq!(event.event, None, "AG-UI events have no `event:` name");
        out.push(serde_json::from_str(&event.data).unwrap_or_else(|e| panic!("not JSON ({e}): {}", event.data)));
    }
    out
}

fn types(events: &[Value]) -> Vec<&str> {
    events.iter().map(|e| e["type"].as_str().expect("a type")).collect()
}

fn text_of(events: &[Value]) -> String {
    events.iter().filter(|e| e["type"] == "TEXT_MESSAGE_CONTENT").map(|e| e["delta"].as_str().expect("delta")).collect()
}

/// The stored assistant text after the run's prompt.
async fn stored_text(server: &TestServer, run: &Value) -> String {
    let session = run["sessionId"].as_str().expect("sessionId");
    let page = server.messages(session, "?limit=500").await;
    let after = run["userMessageIndex"].as_u64().expect("index");
    page["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["index"].as_u64() > Some(after) && m["role"] == "assistant")
        .flat_map(|m| m["content"].as_array().expect("content").iter())
        .filter(|c| c["type"] == "text")
        .map(|c| c["text"].as_str().expect("text"))
        .collect()
}

async fn run_of(server: &TestServer, events: &[Value]) -> Value {
    let id = events[0]["runId"].as_str().expect("runId");
    assert!(id.starts_with("run_"), "RUN_STARTED names the Spool run: {}", events[0]);
    let (status, run) = server.get(&format!("/api/runs/{id}")).await;
    assert_eq!(status, StatusCode::OK);
    run
}

#[tokio::test]
async fn a_prompt_streams_ag_ui_events_and_a_retry_follows_the_same_run() {
    let server = TestServer::start().await;
    let project = server.default_project().await;
    let body = input("thread-one", &project, json!([user("m1", "echo: hello big world")]));
    let first = events(post(&server, &body).await).await;
    let kinds = types(&first);
    assert_eq!(kinds[..2], ["RUN_STARTED", "STATE_SNAPSHOT"]);
    assert_eq!(kinds.last(), Some(&"RUN_FINISHED"));
    assert_eq!(first[0]["threadId"], "thread-one");
    assert_eq!(first[0]["protocolVersion"], "1.0");
    assert_eq!(first.last().expect("an end")["outcome"], json!({"type": "success"}));
    let run = run_of(&server, &first).await;
    assert_eq!(first[1]["snapshot"]["sessionId"], run["sessionId"]);
    assert_eq!(text_of(&first), "hello big world");
    assert_eq!(text_of(&first), stored_text(&server, &run).await);

    // The same user message again: the run it started, replayed, not a second prompt.
    let again = events(post(&server, &body).await).await;
    assert_eq!(again[0]["runId"], first[0]["runId"]);
    assert_eq!(text_of(&again), text_of(&first));
    let session = run["sessionId"].as_str().expect("sessionId");
    let page = server.messages(session, "?limit=500").await;
    let users = page["messages"].as_array().expect("messages").iter().filter(|m| m["role"] == "user").count();
    assert_eq!(users, 1, "prompted once");

    // A new message on the thread is a new run of the same session.
    let body = input("thread-one", &project, json!([user("m1", "echo: hello big world"), user("m2", "echo: more")]));
    let second = events(post(&server, &body).await).await;
    let next = run_of(&server, &second).await;
    assert_eq!(next["sessionId"], run["sessionId"]);
    assert_ne!(next["id"], run["id"]);
}

#[tokio::test]
async fn an_interrupt_is_answered_once_and_the_run_goes_on_in_the_answering_stream() {
    let server = TestServer::start().await;
    let project = server.default_project().await;
    let args = json!({"path": "out.txt", "content": "from AG-UI"}).to_string();
    let messages = json!([user("w1", &format!("tool: write {args}"))]);
    let asked = events(post(&server, &input("thread-w", &project, messages.clone())).await).await;
    let end = asked.last().expect("an end");
    assert_eq!(end["type"], "RUN_FINISHED");
    assert_eq!(end["outcome"]["type"], "interrupt", "{end}");
    let interrupt = &end["outcome"]["interrupts"][0];
    let approval = interrupt["id"].as_str().expect("an interrupt id");
    assert!(approval.starts_with("per_"));
    assert_eq!(interrupt["reason"], "tool_approval");
    assert!(interrupt["expiresAt"].as_str().is_some_and(|t| t.ends_with('Z')), "{interrupt}");
    let call = interrupt["toolCallId"].as_str().expect("toolCallId");
    assert!(asked.iter().any(|e| e["type"] == "TOOL_CALL_END" && e["toolCallId"] == call));
    assert!(!server.project_dir().join("out.txt").exists(), "nothing written before the decision");

    let mut answer = input("thread-w", &project, messages);
    answer["resume"] = json!([{"interruptId": approval, "status": "resolved", "payload": {"approved": true}}]);
    let rest = events(post(&server, &answer).await).await;
    assert_eq!(rest[0]["type"], "RUN_STARTED");
    assert_eq!(rest[0]["runId"], asked[0]["runId"], "one Spool run");
    let resolved: Vec<&Value> = rest.iter().filter(|e| e["type"] == "CUSTOM").collect();
    assert_eq!(resolved.len(), 1);
    assert_eq!(resolved[0]["value"]["decision"], "once");
    assert!(rest.iter().any(|e| e["type"] == "TOOL_CALL_RESULT" && e["toolCallId"] == call));
    assert!(!rest.iter().any(|e| e["type"] == "TOOL_CALL_START" && e["toolCallId"] == call), "sent once, before");
    assert_eq!(rest.last().expect("an end")["outcome"], json!({"type": "success"}));
    assert_eq!(std::fs::read_to_string(server.project_dir().join("out.txt")).expect("written"), "from AG-UI");
    let run = run_of(&server, &rest).await;
    assert_eq!(run["status"], "completed");

    // The same answer again gets the same rest of the run; a different one is refused.
    // (The title's `STATE_DELTA` comes whenever the title call ends: not compared.)
    let retried = events(post(&server, &answer).await).await;
    let fixed = |events: &[Value]| {
        types(events).into_iter().filter(|t| *t != "STATE_DELTA").map(str::to_owned).collect::<Vec<_>>()
    };
    assert_eq!(fixed(&retried), fixed(&rest));
    assert_eq!(text_of(&retried), text_of(&rest));
    answer["resume"] = json!([{"interruptId": approval, "status": "resolved", "payload": {"approved": false}}]);
    let (status, body) = server.send(server.client.post(server.url("/api/ag-ui")).json(&answer)).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    let session = run["sessionId"].as_str().expect("sessionId");
    let page = server.messages(session, "?limit=500").await;
    let results = page["messages"].as_array().expect("messages").iter().filter(|m| m["toolCallId"] == call).count();
    assert_eq!(results, 1, "the call ran once");
}

#[tokio::test]
async fn a_question_is_an_interrupt_answered_once_with_the_persons_words() {
    let server = TestServer::start().await;
    let project = server.default_project().await;
    let args = json!({"question": "Which colour?", "options": [{"label": "red"}, {"label": "blue"}]});
    let messages = json!([user("q1", &format!("tool: question {args}"))]);
    let asked = events(post(&server, &input("thread-q", &project, messages.clone())).await).await;
    let end = asked.last().expect("an end");
    assert_eq!(end["outcome"]["type"], "interrupt", "{end}");
    let interrupt = &end["outcome"]["interrupts"][0];
    assert_eq!(interrupt["reason"], "question");
    assert_eq!(interrupt["message"], "Which colour?");
    assert_eq!(interrupt["responseSchema"]["properties"]["answer"]["examples"], json!(["red", "blue"]));
    let approval = interrupt["id"].as_str().expect("an interrupt id");

    // An answer of one's own, not one of the options: the model reads it.
    let mut answer = input("thread-q", &project, messages);
    answer["resume"] = json!([{"interruptId": approval, "status": "resolved", "payload": {"answer": "green"}}]);
    let rest = events(post(&server, &answer).await).await;
    assert_eq!(rest[0]["runId"], asked[0]["runId"], "one Spool run");
    let result = rest.iter().find(|e| e["type"] == "TOOL_CALL_RESULT").expect("the question's result");
    assert_eq!(result["content"], "The person answered: green");
    assert!(text_of(&rest).contains("Tool question returned 1 line: The person answered: green"), "{rest:?}");
    assert_eq!(rest.last().expect("an end")["outcome"], json!({"type": "success"}));

    // The same answer again gets the same rest of the run; another one is refused.
    let retried = events(post(&server, &answer).await).await;
    assert_eq!(text_of(&retried), text_of(&rest));
    answer["resume"][0]["payload"] = json!({"answer": "red"});
    let (status, body) = server.send(server.client.post(server.url("/api/ag-ui")).json(&answer)).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    let run = run_of(&server, &rest).await;
    let page = server.messages(run["sessionId"].as_str().expect("sessionId"), "?limit=500").await;
    let results = page["messages"].as_array().expect("messages").iter().filter(|m| m["role"] == "toolResult").count();
    assert_eq!(results, 1, "answered once");
}

/// A stream read until `contents` text deltas came: its events with their ids, then
/// dropped (the client went away).
async fn read_then_drop(res: reqwest::Response, contents: usize) -> Vec<(u64, Value)> {
    let mut stream = SseStream::new(res);
    let mut got = Vec::new();
    while got.iter().filter(|(_, e): &&(u64, Value)| e["type"] == "TEXT_MESSAGE_CONTENT").count() < contents {
        let event = stream.next_event().await.expect("the stream goes on");
        got.push(numbered(&event));
    }
    got
}

fn numbered(event: &spool_protocol::sse::SseEvent) -> (u64, Value) {
    let id = event.id.as_deref().unwrap_or_else(|| panic!("an event with no id: {}", event.data));
    (id.parse().expect("a numeric id"), serde_json::from_str(&event.data).expect("JSON"))
}

/// A re-attaching stream read to its end: its own opening (unnumbered), then the run's
/// events with their ids.
async fn reattach(server: &TestServer, run: &str, last: u64) -> (Vec<Value>, Vec<(u64, Value)>) {
    let (opening, rest) = reattach_at(server, run, &last.to_string()).await;
    (opening, rest.into_iter().map(|(id, event)| (id.parse().expect("a numeric id"), event)).collect())
}

/// [`reattach`] after an event id as it came (`N`, or `<approval>:N` in a continuation).
async fn reattach_at(server: &TestServer, run: &str, last: &str) -> (Vec<Value>, Vec<(String, Value)>) {
    let url = server.url(&format!("/api/ag-ui/runs/{run}/events?threadId=thread-drop"));
    let request = server.client.get(url).header("last-event-id", last).send();
    let res = tokio::time::timeout(WAIT, request).await.expect("answers in time").expect("request");
    assert_eq!(res.status(), StatusCode::OK);
    let mut stream = SseStream::new(res);
    let (mut opening, mut rest) = (Vec::new(), Vec::new());
    while let Some(event) = stream.next_event().await {
        match event.id {
            None => {
                assert!(rest.is_empty(), "only the opening is unnumbered: {}", event.data);
                opening.push(serde_json::from_str(&event.data).expect("JSON"));
            }
            Some(id) => rest.push((id, serde_json::from_str(&event.data).expect("JSON"))),
        }
    }
    (opening, rest)
}

/// A stream's events with their ids as they came (`None` for an unnumbered one), read to
/// its end or, with `contents`, until that many text deltas came, then dropped.
async fn with_ids(res: reqwest::Response, contents: Option<usize>) -> Vec<(Option<String>, Value)> {
    assert_eq!(res.status(), StatusCode::OK);
    let mut stream = SseStream::new(res);
    let mut got: Vec<(Option<String>, Value)> = Vec::new();
    while contents.is_none_or(|n| got.iter().filter(|(_, e)| e["type"] == "TEXT_MESSAGE_CONTENT").count() < n) {
        let Some(event) = stream.next_event().await else {
            assert!(contents.is_none(), "the stream goes on");
            break;
        };
        got.push((event.id.clone(), serde_json::from_str(&event.data).expect("JSON")));
    }
    got
}

#[tokio::test]
async fn a_continuation_dropped_mid_way_re_attaches_after_its_last_event_and_gets_every_event_once() {
    let server = TestServer::start().await;
    let project = server.default_project().await;
    let args = json!({"path": "out.txt", "content": "from AG-UI"}).to_string();
    let messages = json!([user("c1", &format!("tool: write {args}"))]);
    let asked = events(post(&server, &input("thread-drop", &project, messages.clone())).await).await;
    let approval = asked.last().expect("an end")["outcome"]["interrupts"][0]["id"].as_str().expect("an interrupt");
    let run = asked[0]["runId"].as_str().expect("runId").to_owned();
    let mut answer = input("thread-drop", &project, messages);
    answer["resume"] = json!([{"interruptId": approval, "status": "resolved", "payload": {"approved": true}}]);

    // The continuation numbers its events after the approval it continues, its opening
    // 1 and 2; the decision it opens with comes unnumbered. The client reads two deltas
    // of the model's answer to the result and goes away.
    let got = with_ids(post(&server, &answer).await, Some(2)).await;
    assert_eq!(got[0].0.as_deref(), Some(format!("{approval}:1").as_str()));
    assert_eq!(got[2].0, None, "the decision: {}", got[2].1);
    assert_eq!(got[2].1["value"]["decision"], "once");
    let last = got.last().expect("events").0.clone().expect("a delta is numbered");

    // Re-attached after its last event: the rest of the continuation, opened again as
    // an AG-UI client accepts it, the decision not sent twice.
    let (opening, rest) = reattach_at(&server, &run, &last).await;
    assert_eq!(types(&opening), ["RUN_STARTED", "STATE_SNAPSHOT", "TEXT_MESSAGE_START"]);
    let started = got.iter().find(|(_, e)| e["type"] == "TEXT_MESSAGE_START").expect("a message started");
    assert_eq!(opening[2], started.1, "the message it was in the middle of");
    assert_eq!(server.wait_run(&run).await["status"], "completed");
    let numbered: Vec<(String, Value)> =
        got.iter().filter_map(|(id, e)| id.clone().map(|id| (id, e.clone()))).chain(rest.iter().cloned()).collect();
    let ids: Vec<String> = numbered.iter().map(|(id, _)| id.clone()).collect();
    let want: Vec<String> = (1..=numbered.len()).map(|n| format!("{approval}:{n}")).collect();
    assert_eq!(ids, want, "every event once, none missing");
    let read: Vec<Value> = numbered.iter().map(|(_, e)| e.clone()).collect();
    assert_eq!(read.last().expect("an end")["outcome"], json!({"type": "success"}));
    assert!(!read.iter().any(|e| e["type"] == "CUSTOM"), "the decision once, unnumbered");

    // The same as one continuation read whole: the same answer again follows it.
    let whole = with_ids(post(&server, &answer).await, None).await;
    let whole: Vec<(String, Value)> = whole.into_iter().filter_map(|(id, e)| id.map(|id| (id, e))).collect();
    assert_eq!(numbered, whole);
    assert!(text_of(&read).starts_with("Tool write returned"), "{}", text_of(&read));
    assert!(stored_text(&server, &run_of(&server, &asked).await).await.ends_with(&text_of(&read)));

    // Once the run's frames have left the session's buffer (a later run of 400 deltas
    // pushed them out), its frame log gives the same events under the same ids.
    crate::replay::logged(&server, &run).await;
    let long = input("thread-drop", &project, json!([user("c1", "tool: write"), user("c2", "stream: 400")]));
    events(post(&server, &long).await).await;
    let (opening, again) = reattach_at(&server, &run, &last).await;
    assert_eq!(types(&opening), ["RUN_STARTED", "STATE_SNAPSHOT", "TEXT_MESSAGE_START"]);
    assert_eq!(again, rest, "the frame log replays what the live stream sent");
}

/// The numbered events of a stream (the decision a continuation opens with is not).
fn numbered_only(got: Vec<(Option<String>, Value)>) -> Vec<(String, Value)> {
    got.into_iter().filter_map(|(id, e)| id.map(|id| (id, e))).collect()
}

#[tokio::test]
async fn a_continuation_after_one_of_several_calls_asks_re_attaches_numbered_as_it_was_sent() {
    let write = json!({"path": "out.txt", "content": "from AG-UI"}).to_string();
    // One model turn, two calls: a read that runs, a write that asks, either way round.
    several_calls_one_asks(&format!("tool: read {{\"path\": \"README.md\"}}\ntool: write {write}")).await;
    several_calls_one_asks(&format!("tool: write {write}\ntool: read {{\"path\": \"README.md\"}}")).await;
}

/// Runs `prompt` (several calls, one asking), approves, reads one delta of the
/// continuation and re-attaches after it, from the buffer and from the frame log.
async fn several_calls_one_asks(prompt: &str) {
    let server = TestServer::start().await;
    let project = server.default_project().await;
    let messages = json!([user("c1", prompt)]);
    let asked = events(post(&server, &input("thread-drop", &project, messages.clone())).await).await;
    let approval = asked.last().expect("an end")["outcome"]["interrupts"][0]["id"].as_str().expect("an interrupt");
    let run = asked[0]["runId"].as_str().expect("runId").to_owned();
    assert_eq!(types(&asked).iter().filter(|t| **t == "TOOL_CALL_START").count(), 2, "{asked:?}");
    let mut answer = input("thread-drop", &project, messages);
    answer["resume"] = json!([{"interruptId": approval, "status": "resolved", "payload": {"approved": true}}]);

    // Approved; the client reads one delta of the model's answer and goes away.
    let got = numbered_only(with_ids(post(&server, &answer).await, Some(1)).await);
    let last = got.last().expect("events").0.clone();
    // The same answer again follows the whole continuation.
    let whole = numbered_only(with_ids(post(&server, &answer).await, None).await);
    let want: Vec<String> = (1..=whole.len()).map(|n| format!("{approval}:{n}")).collect();
    assert_eq!(whole.iter().map(|(id, _)| id.clone()).collect::<Vec<_>>(), want);
    assert!(got.iter().all(|e| whole.contains(e)), "the live stream is the continuation's start");
    // The client has both calls from the turn's message: neither is announced again.
    assert!(!whole.iter().any(|(_, e)| e["type"] == "TOOL_CALL_START"), "{whole:?}");

    // Re-attached from the session's buffer: the rest, every event once.
    let (_, rest) = reattach_at(&server, &run, &last).await;
    let joined: Vec<(String, Value)> = got.iter().cloned().chain(rest.iter().cloned()).collect();
    assert_eq!(joined, whole, "buffer: the live start and the re-attach are the continuation");

    // From the frame log once the run's frames left the buffer: the same events, same ids.
    crate::replay::logged(&server, &run).await;
    let long = input("thread-drop", &project, json!([user("c1", "tool: write"), user("c2", "stream: 400")]));
    events(post(&server, &long).await).await;
    let (_, again) = reattach_at(&server, &run, &last).await;
    assert_eq!(again, rest, "frame log: the same rest under the same ids");
    let (_, from_start) = reattach_at(&server, &run, &format!("{approval}:0")).await;
    // (Its own opening stands for the continuation's, events 1 and 2.)
    assert_eq!(from_start, whole[2..], "frame log: the whole continuation under the same ids");
}

#[tokio::test]
async fn an_ag_ui_client_dropped_mid_run_re_attaches_and_gets_every_event_once() {
    let server = TestServer::start().await;
    let project = server.default_project().await;
    let body = input("thread-drop", &project, json!([user("d1", "stream: 3000")]));
    let got = read_then_drop(post(&server, &body).await, 3).await;
    let run = got[0].1["runId"].as_str().expect("RUN_STARTED came first").to_owned();
    let last = got.last().expect("events").0;

    // Right away, while the run goes on: everything after the last event, live to the
    // end, in a stream an AG-UI client accepts on its own (the run and the message it
    // was in the middle of opened again).
    let (opening, rest) = reattach(&server, &run, last).await;
    assert_eq!(types(&opening), ["RUN_STARTED", "STATE_SNAPSHOT", "TEXT_MESSAGE_START"]);
    assert_eq!(opening[0]["runId"], run.as_str());
    assert_eq!(opening[0]["threadId"], "thread-drop");
    let started = got.iter().find(|(_, e)| e["type"] == "TEXT_MESSAGE_START").expect("a message started");
    assert_eq!(opening[2], started.1, "the message it was in the middle of");
    let settled = server.wait_run(&run).await;
    assert_eq!(settled["status"], "completed", "the drop cancelled nothing: {settled}");
    let whole: Vec<(u64, Value)> = got.iter().cloned().chain(rest.iter().cloned()).collect();
    let ids: Vec<u64> = whole.iter().map(|(id, _)| *id).collect();
    assert_eq!(ids, (1..=whole.len() as u64).collect::<Vec<_>>(), "every event once, none missing");
    let events: Vec<Value> = whole.into_iter().map(|(_, e)| e).collect();
    assert_eq!(types(&events).iter().filter(|t| **t == "RUN_STARTED").count(), 1);
    assert_eq!(events.last().expect("an end")["type"], "RUN_FINISHED");
    assert_eq!(events.last().expect("an end")["outcome"], json!({"type": "success"}));
    assert_eq!(events.last().expect("an end")["threadId"], "thread-drop");
    assert_eq!(text_of(&events), stored_text(&server, &run_of(&server, &events).await).await);
    assert_eq!(text_of(&events).split(' ').count(), 3000);

    // Once the run is over and its start has left the session's buffer, its frame log
    // gives the same events under the same ids.
    crate::replay::logged(&server, &run).await;
    let (_, again) = reattach(&server, &run, last).await;
    assert_eq!(again, rest, "the frame log replays what the live stream sent");
    // From the start: the whole run once more, as the first stream numbered it.
    let (opening, all) = reattach(&server, &run, 0).await;
    assert_eq!(types(&opening), ["RUN_STARTED", "STATE_SNAPSHOT"]);
    assert_eq!(all.first().expect("events").0, 3, "the opening was the first stream's 1 and 2");
    assert_eq!(all[..got.len() - 2], got[2..]);
}

#[tokio::test]
async fn a_re_attach_names_a_run_of_the_callers_and_a_count_it_can_have() {
    let server = TestServer::start().await;
    let project = server.default_project().await;
    let first = events(post(&server, &input("thread-r", &project, json!([user("r1", "echo: hi there")]))).await).await;
    let run = first[0]["runId"].as_str().expect("runId");
    let cases = [
        ("/api/ag-ui/runs/run_01jd0000000000000000000001/events".to_owned(), StatusCode::NOT_FOUND),
        (format!("/api/ag-ui/runs/{run}/events?after=9007199254740992"), StatusCode::BAD_REQUEST),
        (format!("/api/ag-ui/runs/{run}/events?threadId=a/b"), StatusCode::BAD_REQUEST),
        // A continuation's id names an approval of the run.
        (format!("/api/ag-ui/runs/{run}/events?after=per_x:1"), StatusCode::BAD_REQUEST),
        (format!("/api/ag-ui/runs/{run}/events?after=per_01jd0000000000000000000000:1"), StatusCode::NOT_FOUND),
    ];
    for (path, want) in cases {
        let (status, body) = server.get(&path).await;
        assert_eq!(status, want, "{path}: {body}");
    }
    // `?after=N` is `Last-Event-ID: N`: the events after N, here the run's last.
    let url = server.url(&format!("/api/ag-ui/runs/{run}/events?after={}", first.len() - 1));
    let rest = events(server.client.get(url).send().await.expect("request")).await;
    assert_eq!(types(&rest), ["RUN_STARTED", "STATE_SNAPSHOT", "RUN_FINISHED"]);
    assert_eq!(rest[0]["threadId"], first[1]["snapshot"]["sessionId"], "the session names the thread by default");
}

#[tokio::test]
async fn a_request_that_asked_to_cancel_on_disconnect_cancels_its_run_when_it_goes_away() {
    let server = TestServer::start().await;
    let project = server.default_project().await;
    let mut body = input("thread-abort", &project, json!([user("s1", "stream: 5000")]));
    body["forwardedProps"]["onDisconnect"] = json!("cancel");
    let got = read_then_drop(post(&server, &body).await, 3).await;
    let run = got[0].1["runId"].as_str().expect("RUN_STARTED came first").to_owned();
    let settled = server.wait_run(&run).await;
    assert_eq!(settled["status"], "cancelled", "{settled}");
}

#[tokio::test]
async fn a_thread_that_names_someone_elses_or_no_session_is_refused() {
    let server = TestServer::start().await;
    let project = server.default_project().await;
    let messages = json!([user("b1", "echo: hi")]);
    let cases = [
        (input("ses_01jd0000000000000000000001", &project, messages.clone()), StatusCode::NOT_FOUND, "not_found"),
        (input("a/b", &project, messages.clone()), StatusCode::BAD_REQUEST, "invalid_thread_id"),
        (input("fresh", &project, json!([])), StatusCode::BAD_REQUEST, "no_user_message"),
        (input("fresh", "prj_nope", messages.clone()), StatusCode::NOT_FOUND, "not_found"),
    ];
    for (body, want, code) in cases {
        let (status, answer) = server.send(server.client.post(server.url("/api/ag-ui")).json(&body)).await;
        assert_eq!(status, want, "{body}: {answer}");
        assert_eq!(answer["error"]["code"], code, "{answer}");
    }
    // Answering on a thread that has no session yet names nothing.
    let mut answer = input("fresh", &project, messages);
    answer["resume"] = json!([{"interruptId": "per_01jd0000000000000000000004", "status": "cancelled"}]);
    let (status, body) = server.send(server.client.post(server.url("/api/ag-ui")).json(&answer)).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
}

#[tokio::test]
async fn a_retry_after_the_runs_frames_left_the_buffer_draws_the_run_from_the_store() {
    let server = TestServer::start().await;
    let project = server.default_project().await;
    // 400 deltas: more frames than the session's replay buffer keeps (256), so by the
    // run's end its first frames have left it.
    let long = input("thread-long", &project, json!([user("l1", "stream: 400")]));
    let streamed = events(post(&server, &long).await).await;
    let run = run_of(&server, &streamed).await;
    assert_eq!(text_of(&streamed).split(' ').count(), 400);

    let again = events(post(&server, &long).await).await;
    assert_eq!(again[0]["runId"], streamed[0]["runId"], "the run the message started");
    assert_eq!(text_of(&again), text_of(&streamed));
    assert_eq!(text_of(&again), stored_text(&server, &run).await);
    assert_eq!(
        types(&again),
        [
            "RUN_STARTED",
            "STATE_SNAPSHOT",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "RUN_FINISHED"
        ],
        "drawn whole from the stored message"
    );
    assert_eq!(again.last().expect("an end")["outcome"], json!({"type": "success"}));
}

#[tokio::test]
async fn an_interrupt_decided_through_spools_own_route_is_read_on_with_a_cancelled_entry() {
    let server = TestServer::start().await;
    let project = server.default_project().await;
    let args = json!({"path": "elsewhere.txt", "content": "decided elsewhere"}).to_string();
    let messages = json!([user("e1", &format!("tool: write {args}"))]);
    let asked = events(post(&server, &input("thread-e", &project, messages.clone())).await).await;
    let interrupt = &asked.last().expect("an end")["outcome"]["interrupts"][0];
    let approval = interrupt["id"].as_str().expect("an interrupt id");
    let run = run_of(&server, &asked).await;
    let session = run["sessionId"].as_str().expect("sessionId");
    let (status, body) =
        server.post(&format!("/api/sessions/{session}/approvals/{approval}"), json!({"decision": "once"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");

    // Answering it now cannot apply; abandoning it reads the run on from the interrupt.
    let mut answer = input("thread-e", &project, messages);
    answer["resume"] = json!([{"interruptId": approval, "status": "resolved", "payload": {"approved": false}}]);
    let (status, body) = server.send(server.client.post(server.url("/api/ag-ui")).json(&answer)).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    answer["resume"] = json!([{"interruptId": approval, "status": "cancelled"}]);
    let rest = events(post(&server, &answer).await).await;
    let resolved: Vec<&Value> = rest.iter().filter(|e| e["type"] == "CUSTOM").collect();
    assert_eq!(resolved.len(), 1, "{rest:?}");
    assert_eq!(resolved[0]["value"]["decision"], "once", "the decision as it was taken");
    assert_eq!(rest.last().expect("an end")["outcome"], json!({"type": "success"}));
    assert_eq!(
        std::fs::read_to_string(server.project_dir().join("elsewhere.txt")).expect("written"),
        "decided elsewhere"
    );
    assert_eq!(server.wait_run(run["id"].as_str().expect("id")).await["status"], "completed");
}

#[tokio::test]
async fn an_expired_interrupt_is_read_on_to_its_cancelled_run() {
    let clock = ManualClock::starting_now();
    let engine = EngineConfig { clock: clock.clone().into(), ..EngineConfig::default() };
    let server = TestServer::start_with(TestOptions { engine, ..TestOptions::default() }).await;
    let project = server.default_project().await;
    let messages = json!([user("x1", "tool: write {\"path\": \"late.txt\", \"content\": \"x\"}")]);
    let asked = events(post(&server, &input("thread-x", &project, messages.clone())).await).await;
    let interrupt = &asked.last().expect("an end")["outcome"]["interrupts"][0];
    let approval = interrupt["id"].as_str().expect("an interrupt id");
    let run = run_of(&server, &asked).await;
    let session = run["sessionId"].as_str().expect("sessionId");
    let (_, detail) = server.get(&format!("/api/sessions/{session}")).await;
    let expires = detail["state"]["pendingApprovals"][0]["expiresAt"].as_i64().expect("expiresAt");
    // `expiresAt` on the wire is the same instant, in ISO 8601.
    let seconds = interrupt["expiresAt"].as_str().expect("ISO time");
    assert!(seconds.ends_with(&format!("{:02}.{:03}Z", expires / 1000 % 60, expires % 1000)), "{seconds} / {expires}");

    clock.advance_to(expires);
    assert_eq!(server.wait_run(run["id"].as_str().expect("id")).await["status"], "cancelled");
    // Unloaded meanwhile (idle, as a long wait makes it): the run's frames are gone, and
    // the stream is drawn from the store. The run record says "cancelled" a moment before
    // the session lets go of the run and the first POST's stream is dropped, so the test
    // waits for the session to become unloadable (under load it was not yet, 3 in 40).
    let deadline = tokio::time::Instant::now() + WAIT;
    while server.engine.unload_idle(std::time::Duration::ZERO) == 0 {
        assert!(tokio::time::Instant::now() < deadline, "the session never became idle");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let mut answer = input("thread-x", &project, messages);
    answer["resume"] = json!([{"interruptId": approval, "status": "resolved", "payload": {"approved": true}}]);
    let (status, body) = server.send(server.client.post(server.url("/api/ag-ui")).json(&answer)).await;
    assert_eq!(status, StatusCode::GONE, "{body}");
    answer["resume"] = json!([{"interruptId": approval, "status": "cancelled"}]);
    let rest = events(post(&server, &answer).await).await;
    let custom = rest.iter().find(|e| e["type"] == "CUSTOM").expect("the resolution");
    assert_eq!(custom["value"]["decision"], "expired");
    assert!(!rest.iter().any(|e| e["type"] == "TOOL_CALL_START"), "the client has the call: {:?}", types(&rest));
    assert_eq!(rest.last().expect("an end")["outcome"], json!({"type": "cancelled"}), "{rest:?}");
    assert!(!server.project_dir().join("late.txt").exists());
}

#[tokio::test]
async fn a_failed_run_ends_with_run_error_and_its_stored_error() {
    // One model call is allowed; the tool result needs a second.
    let engine = EngineConfig { max_turns: 1, ..EngineConfig::default() };
    let server = TestServer::start_with(TestOptions { engine, ..TestOptions::default() }).await;
    let project = server.default_project().await;
    let body = input("thread-f", &project, json!([user("f1", "tool: read {\"path\":\"README.md\"}")]));
    let events = events(post(&server, &body).await).await;
    let end = events.last().expect("an end");
    assert_eq!(end["type"], "RUN_ERROR", "{:?}", types(&events));
    assert!(!types(&events).contains(&"RUN_FINISHED"));
    let run = server.wait_run(events[0]["runId"].as_str().expect("runId")).await;
    assert_eq!(run["status"], "failed");
    assert_eq!(end["code"], run["error"]["code"]);
    assert_eq!(end["code"], "max_turns_exceeded");
    assert_eq!(end["message"], run["error"]["message"]);
}

#[tokio::test]
async fn an_interrupt_answered_after_a_restart_goes_on_without_repeating_the_run() {
    let server = TestServer::start().await;
    let project = server.default_project().await;
    let args = json!({"path": "later.txt", "content": "after a long wait"}).to_string();
    let messages = json!([user("u1", &format!("tool: write {args}"))]);
    let asked = events(post(&server, &input("thread-u", &project, messages.clone())).await).await;
    let interrupt = &asked.last().expect("an end")["outcome"]["interrupts"][0];
    let (approval, call) = (interrupt["id"].clone(), interrupt["toolCallId"].clone());
    // A restart in between: the new server knows nothing of the run's frames.
    let server = server.restart().await;

    let mut answer = input("thread-u", &project, messages);
    answer["resume"] = json!([{"interruptId": approval, "status": "resolved", "payload": {"approved": true}}]);
    let rest = events(post(&server, &answer).await).await;
    let kinds = types(&rest);
    assert_eq!(kinds[..3], ["RUN_STARTED", "STATE_SNAPSHOT", "CUSTOM"], "{kinds:?}");
    assert_eq!(rest[2]["value"]["decision"], "once");
    assert!(!rest.iter().any(|e| e["type"] == "TOOL_CALL_START"), "the client has the call: {kinds:?}");
    let results: Vec<&Value> = rest.iter().filter(|e| e["type"] == "TOOL_CALL_RESULT").collect();
    assert_eq!(results.len(), 1, "{kinds:?}");
    assert_eq!(results[0]["toolCallId"], call);
    assert_eq!(rest.last().expect("an end")["outcome"], json!({"type": "success"}));
    let run = run_of(&server, &rest).await;
    assert_eq!(text_of(&rest), stored_text(&server, &run).await, "every word once");
    assert_eq!(std::fs::read_to_string(server.project_dir().join("later.txt")).expect("written"), "after a long wait");
}

/// `get_location`, declared the way an AG-UI frontend declares its tools.
fn with_location_tool(mut body: Value) -> Value {
    body["tools"] = json!([{
        "name": "get_location",
        "description": "Where the person is, as a city name",
        "parameters": {"type": "object", "properties": {}},
    }]);
    body
}

/// The `toolResult` messages of `call` the session stored.
async fn results_of(server: &TestServer, session: &str, call: &str) -> Vec<Value> {
    let page = server.messages(session, "?limit=500").await;
    let messages = page["messages"].as_array().expect("messages").iter();
    messages.filter(|m| m["role"] == "toolResult" && m["toolCallId"] == call).cloned().collect()
}

#[tokio::test]
async fn a_client_tool_call_ends_the_stream_pending_and_its_tool_message_goes_on_once() {
    let server = TestServer::start().await;
    let project = server.default_project().await;
    let prompt = user("c1", "tool: get_location {}");
    let asked = events(post(&server, &with_location_tool(input("thread-c", &project, json!([prompt])))).await).await;
    let end = asked.last().expect("an end");
    let call = end["outcome"]["pendingToolCallIds"][0].as_str().expect("a pending call").to_owned();
    assert_eq!(end["outcome"], json!({"type": "success", "pendingToolCallIds": [call]}), "{end}");
    let start = asked.iter().find(|e| e["type"] == "TOOL_CALL_START").expect("the call");
    assert_eq!((start["toolCallId"].as_str(), start["toolCallName"].as_str()), (Some(&*call), Some("get_location")));
    assert!(!types(&asked).contains(&"TOOL_CALL_RESULT"), "the client runs it: {:?}", types(&asked));
    let run = run_of(&server, &asked).await;
    assert_eq!(run["status"], "interrupted");
    let session = run["sessionId"].as_str().expect("sessionId").to_owned();

    // The client ran it and sends the conversation with its result.
    let assistant = json!({"id": "a1", "role": "assistant", "toolCalls": [
        {"id": call, "type": "function", "function": {"name": "get_location", "arguments": "{}"}},
    ]});
    let tool = json!({"id": "t1", "role": "tool", "toolCallId": call, "content": [
        {"type": "text", "text": "Lisbon"}, {"type": "text", "text": "Portugal"},
    ]});
    let answered = with_location_tool(input("thread-c", &project, json!([prompt, assistant, tool])));
    let rest = events(post(&server, &answered).await).await;
    let kinds = types(&rest);
    assert_eq!(kinds[..2], ["RUN_STARTED", "STATE_SNAPSHOT"], "{kinds:?}");
    assert_eq!(rest[0]["runId"], asked[0]["runId"], "one Spool run");
    // The client has the result it sent: it is not sent back as a second tool message.
    assert!(!kinds.contains(&"TOOL_CALL_RESULT"), "{kinds:?}");
    assert!(!kinds.contains(&"TOOL_CALL_START") && !kinds.contains(&"CUSTOM"), "{kinds:?}");
    assert_eq!(rest.last().expect("an end")["outcome"], json!({"type": "success"}));
    assert_eq!(text_of(&rest), "Tool get_location returned 2 lines: Lisbon");
    let stored = results_of(&server, &session, &call).await;
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0]["content"][0]["text"], "Lisbon\nPortugal", "the text parts joined: {}", stored[0]);
    assert_eq!(stored[0]["isError"], false);

    // The same request again, and another result for the answered call: no second
    // result, no second prompt.
    let again = events(post(&server, &answered).await).await;
    assert_eq!(again[0]["runId"], asked[0]["runId"]);
    let mut other = answered.clone();
    other["messages"][2]["content"] = json!("Porto");
    let other = events(post(&server, &other).await).await;
    assert_eq!(other[0]["runId"], asked[0]["runId"]);
    assert_eq!(results_of(&server, &session, &call).await.len(), 1, "answered once");
    let page = server.messages(&session, "?limit=500").await;
    let users = page["messages"].as_array().expect("messages").iter().filter(|m| m["role"] == "user").count();
    assert_eq!(users, 1, "prompted once");
    assert_eq!(server.wait_run(run["id"].as_str().expect("id")).await["status"], "completed");
}

#[tokio::test]
async fn a_client_tools_continuation_dropped_mid_way_re_attaches_after_its_last_event() {
    let server = TestServer::start().await;
    let project = server.default_project().await;
    let prompt = user("c1", "tool: get_location {}");
    let asked = events(post(&server, &with_location_tool(input("thread-drop", &project, json!([prompt])))).await).await;
    let call = asked.last().expect("an end")["outcome"]["pendingToolCallIds"][0].as_str().expect("a call").to_owned();
    let run = asked[0]["runId"].as_str().expect("runId").to_owned();
    let assistant = json!({"id": "a1", "role": "assistant", "toolCalls": [
        {"id": call, "type": "function", "function": {"name": "get_location", "arguments": "{}"}},
    ]});
    let tool = json!({"id": "t1", "role": "tool", "toolCallId": call, "content": "Lisbon"});
    let answered = with_location_tool(input("thread-drop", &project, json!([prompt, assistant, tool])));

    // The continuation after the call's result is numbered after the call's approval;
    // the client reads one delta and goes away, then re-attaches after it.
    let got = with_ids(post(&server, &answered).await, Some(1)).await;
    assert!(got.iter().all(|(id, _)| id.is_some()), "no decision comes: the client sent the result");
    let last = got.last().expect("events").0.clone().expect("numbered");
    let (approval, _) = last.rsplit_once(':').expect("<approval>:N");
    assert!(approval.starts_with("per_"), "{last}");
    let (opening, rest) = reattach_at(&server, &run, &last).await;
    assert_eq!(types(&opening), ["RUN_STARTED", "STATE_SNAPSHOT", "TEXT_MESSAGE_START"]);
    let numbered: Vec<(String, Value)> =
        got.into_iter().map(|(id, e)| (id.expect("numbered"), e)).chain(rest).collect();
    let want: Vec<String> = (1..=numbered.len()).map(|n| format!("{approval}:{n}")).collect();
    assert_eq!(numbered.iter().map(|(id, _)| id.clone()).collect::<Vec<_>>(), want, "every event once");
    let read: Vec<Value> = numbered.into_iter().map(|(_, e)| e).collect();
    assert_eq!(text_of(&read), "Tool get_location returned 1 line: Lisbon");
    assert!(!types(&read).contains(&"TOOL_CALL_RESULT"), "the client has the result it sent");
    assert_eq!(read.last().expect("an end")["outcome"], json!({"type": "success"}));
}

#[tokio::test]
async fn a_tool_message_with_an_error_is_a_failed_call_and_one_for_no_waiting_call_prompts_as_before() {
    let server = TestServer::start().await;
    let project = server.default_project().await;
    let prompt = user("e1", "tool: get_location {}");
    let asked = events(post(&server, &with_location_tool(input("thread-e", &project, json!([prompt])))).await).await;
    let call = asked.last().expect("an end")["outcome"]["pendingToolCallIds"][0].clone();
    let tool = json!({"id": "t1", "role": "tool", "toolCallId": call, "content": "", "error": "permission denied"});
    let body = with_location_tool(input("thread-e", &project, json!([prompt, tool])));
    let rest = events(post(&server, &body).await).await;
    assert!(!rest.iter().any(|e| e["type"] == "TOOL_CALL_RESULT"), "the client has its result: {:?}", types(&rest));
    assert_eq!(text_of(&rest), "Tool get_location failed: permission denied");
    let run = run_of(&server, &rest).await;
    let session = run["sessionId"].as_str().expect("sessionId");
    let stored = results_of(&server, session, call.as_str().expect("id")).await;
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0]["isError"], true);

    // A new user message, then a tool message for a call nothing waits for: the
    // user message is the prompt, as without it.
    let stray = json!({"id": "t2", "role": "tool", "toolCallId": "call_nobody", "content": "x"});
    let body = input("thread-e", &project, json!([prompt, tool, user("e2", "echo: next"), stray]));
    let next = events(post(&server, &body).await).await;
    assert_ne!(next[0]["runId"], asked[0]["runId"]);
    assert_eq!(text_of(&next), "next");
}

#[tokio::test]
async fn a_client_call_is_answered_after_a_restart_and_the_run_goes_on_from_its_result() {
    let server = TestServer::start().await;
    let project = server.default_project().await;
    let prompt = user("r1", "tool: get_location {}");
    let asked = events(post(&server, &with_location_tool(input("thread-r", &project, json!([prompt])))).await).await;
    let call = asked.last().expect("an end")["outcome"]["pendingToolCallIds"][0].clone();
    let server = server.restart().await;

    let tool = json!({"id": "t1", "role": "tool", "toolCallId": call, "content": "Lisbon"});
    let rest =
        events(post(&server, &with_location_tool(input("thread-r", &project, json!([prompt, tool])))).await).await;
    let kinds = types(&rest);
    assert_eq!(kinds[..2], ["RUN_STARTED", "STATE_SNAPSHOT"], "{kinds:?}");
    assert!(!kinds.contains(&"TOOL_CALL_RESULT"), "the client has its result: {kinds:?}");
    assert!(!kinds.contains(&"TOOL_CALL_START"), "the client has the call: {kinds:?}");
    assert_eq!(rest.last().expect("an end")["outcome"], json!({"type": "success"}));
    let run = run_of(&server, &rest).await;
    assert_eq!(text_of(&rest), stored_text(&server, &run).await, "every word once");
    assert_eq!(text_of(&rest), "Tool get_location returned 1 line: Lisbon");
}

#[tokio::test]
async fn a_result_for_an_expired_client_call_reads_the_cancelled_run_and_is_not_taken() {
    let clock = ManualClock::starting_now();
    let engine = EngineConfig { clock: clock.clone().into(), ..EngineConfig::default() };
    let server = TestServer::start_with(TestOptions { engine, ..TestOptions::default() }).await;
    let project = server.default_project().await;
    let prompt = user("x1", "tool: get_location {}");
    let asked = events(post(&server, &with_location_tool(input("thread-l", &project, json!([prompt])))).await).await;
    let call = asked.last().expect("an end")["outcome"]["pendingToolCallIds"][0].clone();
    let run = run_of(&server, &asked).await;
    let session = run["sessionId"].as_str().expect("sessionId");
    let (_, detail) = server.get(&format!("/api/sessions/{session}")).await;
    let expires = detail["state"]["pendingApprovals"][0]["expiresAt"].as_i64().expect("expiresAt");
    clock.advance_to(expires);
    assert_eq!(server.wait_run(run["id"].as_str().expect("id")).await["status"], "cancelled");

    let tool = json!({"id": "t1", "role": "tool", "toolCallId": call, "content": "too late"});
    let rest =
        events(post(&server, &with_location_tool(input("thread-l", &project, json!([prompt, tool])))).await).await;
    assert_eq!(rest[0]["runId"], asked[0]["runId"], "the run the prompt started, not a new one");
    assert_eq!(rest.last().expect("an end")["outcome"], json!({"type": "cancelled"}), "{:?}", types(&rest));
    // The cancelled run ended the call with an error result of its own; the late one
    // is not taken.
    let stored = results_of(&server, session, call.as_str().expect("id")).await;
    assert_eq!(stored.len(), 1, "{stored:?}");
    assert_eq!(stored[0]["isError"], true);
    assert!(!stored[0].to_string().contains("too late"), "{stored:?}");
}

#[tokio::test]
async fn two_client_calls_in_one_answer_are_pending_one_stream_at_a_time_and_each_result_is_taken_once() {
    let server = TestServer::start().await;
    let project = server.default_project().await;
    let with_tools = |mut body: Value| {
        body["tools"] = json!([
            {"name": "get_location", "description": "Where the person is", "parameters": {"type": "object"}},
            {"name": "get_time", "description": "The browser's clock", "parameters": {"type": "object"}},
        ]);
        body
    };
    let prompt = user("w1", "tool: get_location {}\ntool: get_time {}");
    let asked = events(post(&server, &with_tools(input("thread-w", &project, json!([prompt])))).await).await;
    // Both calls stream (one answer), the run waits for the first only.
    let starts: Vec<&str> = asked
        .iter()
        .filter(|e| e["type"] == "TOOL_CALL_START")
        .map(|e| e["toolCallName"].as_str().expect("name"))
        .collect();
    assert_eq!(starts, ["get_location", "get_time"]);
    let ids: Vec<Value> =
        asked.iter().filter(|e| e["type"] == "TOOL_CALL_START").map(|e| e["toolCallId"].clone()).collect();
    let (first, second) = (ids[0].clone(), ids[1].clone());
    assert_eq!(asked.last().expect("an end")["outcome"], json!({"type": "success", "pendingToolCallIds": [first]}));
    let run = run_of(&server, &asked).await;
    let session = run["sessionId"].as_str().expect("sessionId").to_owned();

    // The client ran both and sends both results while only the first waits: the
    // first is taken, the run goes on and parks at the second.
    let assistant = json!({"id": "a1", "role": "assistant", "toolCalls": [
        {"id": first, "type": "function", "function": {"name": "get_location", "arguments": "{}"}},
        {"id": second, "type": "function", "function": {"name": "get_time", "arguments": "{}"}},
    ]});
    let tool_1 = json!({"id": "t1", "role": "tool", "toolCallId": first, "content": "Lisbon"});
    let tool_2 = json!({"id": "t2", "role": "tool", "toolCallId": second, "content": "12:00"});
    let both = with_tools(input("thread-w", &project, json!([prompt, assistant, tool_1, tool_2])));
    let middle = events(post(&server, &both).await).await;
    assert_eq!(middle[0]["runId"], asked[0]["runId"], "one Spool run");
    assert_eq!(middle.last().expect("an end")["outcome"], json!({"type": "success", "pendingToolCallIds": [second]}));
    assert_eq!(results_of(&server, &session, first.as_str().expect("id")).await.len(), 1);
    assert!(results_of(&server, &session, second.as_str().expect("id")).await.is_empty(), "not waiting yet: not taken");

    // The same messages again: now the second waits and is taken; the first is not
    // taken twice.
    let rest = events(post(&server, &both).await).await;
    assert_eq!(rest[0]["runId"], asked[0]["runId"]);
    assert_eq!(rest.last().expect("an end")["outcome"], json!({"type": "success"}), "{:?}", types(&rest));
    assert_eq!(text_of(&rest), "Tool get_time returned 1 line: 12:00");
    assert_eq!(server.wait_run(run["id"].as_str().expect("id")).await["status"], "completed");
    for (call, text) in [(&first, "Lisbon"), (&second, "12:00")] {
        let stored = results_of(&server, &session, call.as_str().expect("id")).await;
        assert_eq!(stored.len(), 1, "{stored:?}");
        assert_eq!(stored[0]["content"][0]["text"], text);
    }
    let page = server.messages(&session, "?limit=500").await;
    let users = page["messages"].as_array().expect("messages").iter().filter(|m| m["role"] == "user").count();
    assert_eq!(users, 1, "prompted once");
}

/// Presence comes on a timer, so it takes no number: a second viewer joining while the
/// run waits at an approval reaches the continuation as an unnumbered `CUSTOM`
/// `spool.presence` with the counts, and the continuation is numbered as it always was.
#[tokio::test]
async fn a_viewer_joining_while_the_run_waits_shows_as_an_unnumbered_presence_event() {
    let mut options = TestOptions::default();
    options.engine.presence = Some(std::time::Duration::from_millis(50));
    let server = TestServer::start_with(options).await;
    let project = server.default_project().await;
    let args = json!({"path": "out.txt", "content": "from AG-UI"}).to_string();
    let messages = json!([user("p1", &format!("tool: write {args}"))]);
    let asked = events(post(&server, &input("thread-presence", &project, messages.clone())).await).await;
    let approval = asked.last().expect("an end")["outcome"]["interrupts"][0]["id"].as_str().expect("an interrupt");
    let run = asked[0]["runId"].as_str().expect("runId").to_owned();
    let session = run_of(&server, &asked).await["sessionId"].as_str().expect("sessionId").to_owned();

    // A terminal joins while the run waits; its stream hears the counts settle.
    let url = server.url(&format!("/api/sessions/{session}/events?approvals=1&client=cli"));
    let mut terminal = SseStream::new(server.client.get(url).send().await.expect("events"));
    terminal.next_frame().await.expect("snapshot");
    let one = |p: &Value| p["viewers"] == 1 && p["clients"] == json!({"cli": 1});
    loop {
        let frame = terminal.next_json().await.expect("a frame");
        if frame["type"] == "session.presence" && one(&frame["presence"]) {
            break;
        }
    }

    // The continuation carries it, unnumbered, inside the run; its events are numbered
    // `<approval>:N` from its opening, as before.
    let mut answer = input("thread-presence", &project, messages);
    answer["resume"] = json!([{"interruptId": approval, "status": "resolved", "payload": {"approved": true}}]);
    let got = with_ids(post(&server, &answer).await, None).await;
    assert_eq!(got[0].1["runId"], run.as_str(), "one Spool run");
    let presence: Vec<&(Option<String>, Value)> =
        got.iter().filter(|(_, e)| e["type"] == "CUSTOM" && e["name"] == "spool.presence").collect();
    assert!(presence.iter().all(|(id, _)| id.is_none()), "unnumbered: {presence:?}");
    let seen = presence.iter().find(|(_, e)| one(&e["value"])).unwrap_or_else(|| panic!("the terminal: {got:?}"));
    assert_eq!(seen.1["value"]["answerers"], 1, "{}", seen.1);
    let at = |t: &str| got.iter().position(|(_, e)| e["type"] == t).expect(t);
    let place = got.iter().position(|(_, e)| e == &seen.1).expect("seen");
    assert!(at("RUN_STARTED") < place && place < at("RUN_FINISHED"), "inside the run");
    let numbered = numbered_only(got.clone());
    let ids: Vec<String> = numbered.iter().map(|(id, _)| id.clone()).collect();
    let want: Vec<String> = (1..=numbered.len()).map(|n| format!("{approval}:{n}")).collect();
    assert_eq!(ids, want, "presence takes no number");
    assert_eq!(numbered.last().expect("an end").1["outcome"], json!({"type": "success"}));
}

/// The scripted model's line for a file it got whole (issue 42).
fn received(name: &str, media_type: &str, bytes: &[u8]) -> String {
    use sha2::Digest as _;
    let sha = hex_of(&sha2::Sha256::digest(bytes));
    format!("Received {name} ({media_type}, {} bytes, sha256 {}…, bytes match)\n", bytes.len(), &sha[..8])
}

fn hex_of(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test]
async fn a_user_messages_files_reach_the_model_by_every_source_ag_ui_sends() {
    use base64::Engine as _;
    let server = TestServer::start().await;
    let project = server.default_project().await;
    let png: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0";
    let log = b"line one\n";
    let upload = server
        .client
        .post(server.url("/api/uploads?name=notes.txt"))
        .header("content-type", "application/octet-stream")
        .body(&b"some notes"[..]);
    let (status, uploaded) = server.send(upload).await;
    assert_eq!(status, StatusCode::CREATED, "{uploaded}");
    let base64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    let content = json!([
        {"type": "image", "source": {"type": "data", "value": base64(png), "mimeType": "image/png"},
         "metadata": {"filename": "shot.png"}},
        {"type": "document", "source": {"type": "url", "value": uploaded["url"]}},
        {"type": "binary", "mimeType": "text/plain", "data": base64(log), "filename": "app.log"},
        {"type": "text", "text": "echo: seen"},
    ]);
    let body = input("thread-files", &project, json!([{"id": "m1", "role": "user", "content": content}]));
    let got = events(post(&server, &body).await).await;
    assert_eq!(got.last().expect("an end")["outcome"], json!({"type": "success"}), "{got:?}");
    let want = [
        received("shot.png", "image/png", png),
        received("notes.txt", "text/plain", b"some notes"),
        received("app.log", "text/plain", log),
    ]
    .concat()
        + "seen";
    assert_eq!(text_of(&got), want);

    // A URL Spool would have to fetch, or a provider's own file id, is refused.
    let https = json!({"type": "url", "value": "https://example.com/cat.png"});
    let provider = json!({"type": "file", "value": "file-123"});
    for (source, code) in [(https, "unsupported_file_url"), (provider, "unsupported_file_source")] {
        let content = json!([{"type": "image", "source": source}, {"type": "text", "text": "look"}]);
        let body = input("thread-files", &project, json!([{"id": "m2", "role": "user", "content": content}]));
        let res = post(&server, &body).await;
        assert_eq!(res.status(), StatusCode::BAD_REQUEST);
        let refused: Value = res.json().await.expect("JSON");
        assert_eq!(refused["error"]["code"], code, "{refused}");
    }
}
