//! A prompt's files on the way out (issue 42), through a whole server: the native
//! session stream's `message_end` of the user message and a later stream's snapshot hold
//! each file with the URL its owner fetches it from, and that URL gives the bytes back.
//! (Each dialect's shape is golden-tested beside its mapping in `src/dialect`; the hub's
//! `message.created` is checked against its published schema in `hub_conformance.rs`,
//! OpenCode's history and `/event` with the real SDK in `tests/opencode-sdk`.)

use crate::common;

use common::{Open, TestServer, id_of};
use reqwest::StatusCode;
use serde_json::{Value, json};

#[tokio::test]
async fn the_session_stream_and_its_snapshot_carry_a_prompts_files_with_their_url() {
    let server = TestServer::start().await;
    let project = server.default_project().await;
    let session = id_of(&server.create_session(&project, Some("files")).await);
    let mut stream = server.events(&session, Open::fresh()).await;
    stream.frames_until(|f| f.kind == "session.snapshot").await;

    let file = json!({"type": "file", "url": "data:text/plain;base64,bGluZSBvbmUK", "name": "app.log"});
    let (status, accepted) =
        server.post(&format!("/api/sessions/{session}/prompt"), json!({"text": "echo: seen", "parts": [file]})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
    let is_user_end = |f: &common::ReceivedFrame| {
        f.event_type() == Some("message_end") && f.json["event"]["message"]["role"] == "user"
    };
    let frames = stream.frames_until(is_user_end).await;
    let live = frames.last().expect("the user message's end").json["event"]["message"]["content"].clone();
    let expected_file = |content: &Value| {
        assert_eq!(content[0]["type"], "file", "the file first: {content}");
        assert_eq!(
            (&content[0]["name"], &content[0]["mediaType"], &content[0]["size"]),
            (&json!("app.log"), &json!("text/plain"), &json!(9))
        );
        assert_eq!(content[1], json!({"type": "text", "text": "echo: seen"}));
    };
    expected_file(&live);
    server.wait_run(accepted["runId"].as_str().expect("runId")).await;

    // A client that comes later gets the message in the snapshot, the same.
    let mut later = server.events(&session, Open::fresh()).await;
    let snapshot = later.frames_until(|f| f.kind == "session.snapshot").await.pop().expect("a snapshot");
    let user = snapshot.json["state"]["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .find(|m| m["role"] == "user")
        .cloned()
        .expect("the user message");
    assert_eq!(user["content"], live);

    let url = live[0]["url"].as_str().expect("url");
    assert!(url.starts_with("/api/attachments/att_"), "{url}");
    let res = server.client.get(server.url(url)).send().await.expect("download");
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(&res.bytes().await.expect("bytes")[..], b"line one\n");
}
