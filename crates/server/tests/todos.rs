//! The `todo_write` tool through a real server: the model's list becomes the session's
//! `todos`, on the native stream (a `todo_write` event, then in every snapshot), in the
//! store (it survives a restart), replaced whole by the next write; a list that breaks
//! the limits is refused with the reason and changes nothing.

use crate::common;

use common::{Open, TestServer};
use serde_json::{Value, json};

/// Runs one `todo_write` call and returns the tool result the model read and whether it
/// was an error.
async fn write_todos(server: &TestServer, session: &str, todos: Value) -> (String, bool) {
    let run = server.run_prompt(session, &format!("tool: todo_write {}", json!({ "todos": todos }))).await;
    assert_eq!(run["status"], "completed", "{run}");
    let page = server.messages(session, "?limit=500").await;
    let result = page["messages"].as_array().expect("messages").iter().rev().find(|m| m["role"] == "toolResult");
    let result = result.expect("a tool result").clone();
    (result["content"][0]["text"].as_str().expect("text").to_owned(), result["isError"] == true)
}

async fn state_todos(server: &TestServer, session: &str) -> Value {
    let (_, detail) = server.get(&format!("/api/sessions/{session}")).await;
    detail["state"]["todos"].clone()
}

#[tokio::test]
async fn a_todo_list_is_session_state_on_the_stream_and_survives_a_restart() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    assert_eq!(state_todos(&server, &session).await, json!([]), "no list before the first write");
    let mut stream = server.events(&session, Open::fresh()).await;
    let snapshot = stream.next_frame().await.expect("snapshot");

    let (text, is_error) = write_todos(
        &server,
        &session,
        json!([
            {"content": "Read the code", "status": "completed"},
            {"content": "Write the tool", "status": "in_progress", "priority": "high"},
            {"content": "Test it", "status": "pending", "id": "t"},
        ]),
    )
    .await;
    assert!(!is_error, "{text}");
    assert!(text.starts_with("Todo list saved: 3 items (1 in progress, 1 pending, 1 completed)."), "{text}");
    let kept = json!([
        {"content": "Read the code", "status": "completed", "id": "1"},
        {"content": "Write the tool", "status": "in_progress", "priority": "high", "id": "2"},
        {"content": "Test it", "status": "pending", "id": "t"},
    ]);
    let frames = stream.frames_until(|f| f.event_type() == Some("todo_write")).await;
    let event = &frames.last().expect("todo_write").json["event"];
    assert_eq!(event["todos"], kept, "the native stream carries the whole list");
    assert_eq!(snapshot.state().todos, vec![], "the snapshot before it had none");
    assert_eq!(state_todos(&server, &session).await, kept, "a reconnecting client's snapshot has it");

    // The next write replaces the list whole.
    let (_, is_error) =
        write_todos(&server, &session, json!([{"content": "Test it", "status": "completed", "id": "t"}])).await;
    assert!(!is_error);
    let replaced = json!([{"content": "Test it", "status": "completed", "id": "t"}]);
    assert_eq!(state_todos(&server, &session).await, replaced);

    let server = server.restart().await;
    assert_eq!(state_todos(&server, &session).await, replaced, "stored, so a restart keeps it");
    let id: spool_protocol::SessionId = session.parse().expect("a session id");
    let stored = spool_engine::store::Notes::get_todos(&*server.store, &id).await.expect("read the store");
    assert_eq!(serde_json::to_value(stored).expect("JSON"), replaced, "the stored row");
}

#[tokio::test]
async fn a_list_past_the_limits_is_refused_with_the_reason_and_changes_nothing() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    let first = json!([{"content": "Plan", "status": "in_progress", "id": "p"}]);
    let (_, is_error) = write_todos(&server, &session, first.clone()).await;
    assert!(!is_error);

    let too_many: Vec<Value> = (0..101).map(|i| json!({"content": format!("step {i}"), "status": "pending"})).collect();
    let refused = [
        (
            json!([{"content": "a", "status": "in_progress"}, {"content": "b", "status": "in_progress"}]),
            "at most one todo is in_progress",
        ),
        (Value::Array(too_many), "at most 100 todos"),
        (
            json!([{"content": "x".repeat(1001), "status": "pending"}]),
            "todos[0].content must be one line of 1 to 1000 characters",
        ),
        (json!([{"content": "a", "status": "done"}]), "todos[0]: unknown variant `done`"),
        (
            json!([{"content": "a", "status": "pending", "id": "1"}, {"content": "b", "status": "pending", "id": "1"}]),
            "used twice",
        ),
    ];
    for (todos, reason) in refused {
        let (text, is_error) = write_todos(&server, &session, todos).await;
        assert!(is_error && text.contains(reason), "the model is told why: {text}");
        assert_eq!(state_todos(&server, &session).await, first, "nothing changed after: {text}");
    }
}
