//! Files in prompts (issue 42), through a whole server: an upload or an inline data URL
//! reaches the model (the scripted model names each file it got and whether the bytes'
//! SHA-256 matches), a real provider's request carries the image, the bytes come back
//! only to their owner and never as active content, an upload over the limit leaves
//! nothing behind, and deleting the session takes its files with it.

use crate::common;

use common::{TestOptions, TestServer, id_of};
use reqwest::StatusCode;
use serde_json::{Value, json};
use spool_engine::{EngineConfig, Models};
use spool_model::ScriptedModel;
use spool_test_support::{End, Fake, Reply, openai_delta, openai_finish, openai_sse};
use std::path::Path;
use std::sync::Arc;

/// A tiny PNG's start: the signature is what the server sniffs.
const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0";

async fn upload(server: &TestServer, token: Option<&str>, name: &str, bytes: &[u8]) -> (StatusCode, Value) {
    let mut request = server
        .client
        .post(server.url(&format!("/api/uploads?name={name}")))
        .header("content-type", "application/octet-stream")
        .body(bytes.to_vec());
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    server.send(request).await
}

/// A titled session, so no title call takes a reply of a fake provider.
async fn session(server: &TestServer) -> String {
    let project = server.default_project().await;
    id_of(&server.create_session(&project, Some("files")).await)
}

/// Sends a prompt with `parts` and waits for its run; returns the run.
async fn prompt(server: &TestServer, session: &str, body: Value) -> Value {
    let (status, accepted) = server.post(&format!("/api/sessions/{session}/prompt"), body).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
    server.wait_run(accepted["runId"].as_str().expect("runId")).await
}

/// The session's last message of `role`.
async fn last(server: &TestServer, session: &str, role: &str) -> Value {
    let page = server.messages(session, "").await;
    page["messages"].as_array().expect("messages").iter().rfind(|m| m["role"] == role).cloned().expect("a message")
}

fn text_of(message: &Value) -> String {
    message["content"].as_array().expect("content").iter().filter_map(|c| c["text"].as_str()).collect()
}

/// Every file under the data directory's attachments (blobs and temporary files).
fn stored_files(server: &TestServer) -> Vec<String> {
    fn walk(dir: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            if entry.path().is_dir() {
                walk(&entry.path(), out);
            } else {
                out.push(entry.file_name().to_string_lossy().into_owned());
            }
        }
    }
    let mut out = Vec::new();
    walk(&server.dir().join("data/attachments"), &mut out);
    out
}

#[tokio::test]
async fn an_upload_then_a_prompt_naming_it_reaches_the_model_with_its_bytes() {
    let server = TestServer::start().await;
    let session = session(&server).await;
    let (status, file) = upload(&server, None, "shot.png", PNG).await;
    assert_eq!(status, StatusCode::CREATED, "{file}");
    assert_eq!((file["name"].as_str(), file["mediaType"].as_str()), (Some("shot.png"), Some("image/png")));
    let sha = file["sha256"].as_str().expect("sha256").to_owned();

    let run =
        prompt(&server, &session, json!({"text": "echo: seen", "parts": [{"type": "file", "id": file["id"]}]})).await;
    assert_eq!(run["status"], "completed", "{run}");
    let answer = text_of(&last(&server, &session, "assistant").await);
    let expected =
        format!("Received shot.png (image/png, {} bytes, sha256 {}…, bytes match)\nseen", PNG.len(), &sha[..8]);
    assert_eq!(answer, expected);

    // History shows the file before the text, with a URL that gives the bytes back.
    let user = last(&server, &session, "user").await;
    assert_eq!(user["content"][0]["type"], "file", "{user}");
    assert_eq!(user["content"][0]["sha256"], sha.as_str());
    assert_eq!(user["content"][1], json!({"type": "text", "text": "echo: seen"}));
    let url = user["content"][0]["url"].as_str().expect("url");
    let res = server.client.get(server.url(url)).send().await.expect("download");
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(res.headers()["content-type"], "image/png");
    assert_eq!(res.headers()["x-content-type-options"], "nosniff");
    assert_eq!(&res.bytes().await.expect("bytes")[..], PNG);
}

#[tokio::test]
async fn an_inline_data_url_reaches_the_model_as_a_stored_file() {
    let server = TestServer::start().await;
    let session = session(&server).await;
    let url = "data:text/plain;base64,bGluZSBvbmUK"; // "line one\n"
    let parts = json!([{"type": "file", "url": url, "name": "../../app.log"}]);
    let run = prompt(&server, &session, json!({"text": "", "parts": parts})).await;
    assert_eq!(run["status"], "completed", "{run}");
    let answer = text_of(&last(&server, &session, "assistant").await);
    assert!(answer.starts_with("Received app.log (text/plain, 9 bytes, sha256 "), "{answer}");
    assert!(answer.contains("bytes match"), "{answer}");
    let user = last(&server, &session, "user").await;
    assert_eq!(user["content"].as_array().map(Vec::len), Some(1), "a file alone, no empty text: {user}");

    // A URL Spool would have to fetch is refused, saying what to do instead.
    let (status, refused) = server
        .post(
            &format!("/api/sessions/{session}/prompt"),
            json!({"text": "look", "parts": [{"type": "file", "url": "https://example.com/cat.png"}]}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    assert_eq!(refused["error"]["code"], "unsupported_file_url");
}

#[tokio::test]
async fn the_same_bytes_are_kept_once_and_active_content_is_served_as_text() {
    let server = TestServer::start().await;
    let svg = b"<svg xmlns=\"http://www.w3.org/2000/svg\" onload=\"alert(1)\"/>";
    let (_, first) = upload(&server, None, "x.svg", svg).await;
    let (status, second) = upload(&server, None, "y.svg", svg).await;
    assert_eq!(status, StatusCode::CREATED, "{second}");
    assert_ne!(first["id"], second["id"], "two attachments");
    assert_eq!(first["sha256"], second["sha256"]);
    assert_eq!(first["mediaType"], "text/plain", "SVG is text, never an image to render");
    assert_eq!(stored_files(&server), [first["sha256"].as_str().expect("sha")], "one blob, no temporary file");

    let res = server.client.get(server.url(first["url"].as_str().expect("url"))).send().await.expect("download");
    assert_eq!(res.headers()["content-type"], "text/plain; charset=utf-8");
    assert_eq!(res.headers()["content-disposition"], "attachment; filename*=UTF-8''x.svg");
    assert_eq!(res.headers()["x-content-type-options"], "nosniff");
    assert!(res.headers()["content-security-policy"].to_str().expect("ascii").contains("sandbox"));

    let (status, refused) = upload(&server, None, "a.out", b"\x7fELF\x02\x01\x01\0\0\0").await;
    assert_eq!((status, refused["error"]["code"].as_str()), (StatusCode::BAD_REQUEST, Some("unsupported_file_type")));
    assert_eq!(stored_files(&server).len(), 1, "a refused upload leaves nothing");
}

#[tokio::test]
async fn an_upload_over_the_limit_is_refused_and_leaves_nothing_behind() {
    let mut engine = EngineConfig::default();
    engine.attachments.upload_bytes = 1024;
    let server = TestServer::start_with(TestOptions { engine, ..TestOptions::default() }).await;
    let big = vec![b'a'; 4096];
    let (status, refused) = upload(&server, None, "big.txt", &big).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{refused}");
    assert_eq!(refused["error"]["code"], "file_too_large");

    // A body that says nothing of its length is cut off while it streams.
    let chunks = futures::stream::iter((0..8).map(|_| Ok::<_, std::io::Error>(vec![b'a'; 512])));
    let res = server
        .client
        .post(server.url("/api/uploads?name=big.txt"))
        .header("content-type", "application/octet-stream")
        .body(reqwest::Body::wrap_stream(chunks))
        .send()
        .await
        .expect("upload");
    assert_eq!(res.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert!(stored_files(&server).is_empty(), "no blob, no temporary file: {:?}", stored_files(&server));
    let owner = server.engine.local_user().clone();
    use spool_engine::store::prelude::*;
    assert_eq!(server.store.attachment_bytes(&owner).await.expect("bytes"), 0, "no row");
}

#[tokio::test]
async fn deleting_the_session_removes_its_files_and_a_file_another_session_holds_stays() {
    let server = TestServer::start().await;
    let (one, two) = (session(&server).await, session(&server).await);
    let (_, shared) = upload(&server, None, "shared.png", PNG).await;
    let (_, own) = upload(&server, None, "own.txt", b"only here\n").await;
    let parts = json!([{"type": "file", "id": shared["id"]}, {"type": "file", "id": own["id"]}]);
    prompt(&server, &one, json!({"text": "echo: a", "parts": parts})).await;
    prompt(&server, &two, json!({"text": "echo: b", "parts": [{"type": "file", "id": shared["id"]}]})).await;
    assert_eq!(stored_files(&server).len(), 2);

    let (status, _) = server.delete(&format!("/api/sessions/{one}")).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(stored_files(&server), [shared["sha256"].as_str().expect("sha")], "the other session's file stays");
    let (status, _) = server.get(own["url"].as_str().expect("url")).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "gone with its session");
    let second = last(&server, &two, "user").await;
    let res = server.client.get(server.url(second["content"][0]["url"].as_str().expect("url"))).send().await;
    assert_eq!(res.expect("download").status(), StatusCode::OK);

    let (status, _) = server.delete(&format!("/api/sessions/{two}")).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert!(stored_files(&server).is_empty(), "{:?}", stored_files(&server));
}

#[tokio::test]
async fn another_users_attachment_is_a_404() {
    let server = TestServer::start().await;
    let (_, alice) = server.engine.auth().create_token("alice").await.expect("alice");
    let (_, bob) = server.engine.auth().create_token("bob").await.expect("bob");
    let (status, file) = upload(&server, Some(&alice), "shot.png", PNG).await;
    assert_eq!(status, StatusCode::CREATED, "{file}");
    let url = server.url(file["url"].as_str().expect("url"));
    let res = server.client.get(&url).bearer_auth(&alice).send().await.expect("as alice");
    assert_eq!(res.status(), StatusCode::OK);
    let res = server.client.get(&url).bearer_auth(&bob).send().await.expect("as bob");
    assert_eq!(res.status(), StatusCode::NOT_FOUND);
    let res = server.client.get(&url).send().await.expect("anonymous");
    assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn a_model_without_vision_gets_a_clear_error_and_no_run() {
    let models = Models::new(Arc::new(ScriptedModel::default().text_only()));
    let options = TestOptions { models: Some(common::ModelsOverride(models)), ..TestOptions::default() };
    let server = TestServer::start_with(options).await;
    let session = session(&server).await;
    let (_, file) = upload(&server, None, "shot.png", PNG).await;
    let body = json!({"text": "look", "parts": [{"type": "file", "id": file["id"]}]});
    let (status, refused) = server.post(&format!("/api/sessions/{session}/prompt"), body).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    assert_eq!(refused["error"]["code"], "model_cannot_read_images");
    assert!(refused["error"]["message"].as_str().expect("message").contains("scripted:text-only"), "{refused}");
    assert_eq!(server.messages(&session, "").await["total"], 0, "nothing ran");
    // A text file needs no vision.
    let (_, log) = upload(&server, None, "app.log", b"fine\n").await;
    let run =
        prompt(&server, &session, json!({"text": "echo: ok", "parts": [{"type": "file", "id": log["id"]}]})).await;
    assert_eq!(run["status"], "completed", "{run}");
}

#[tokio::test]
async fn an_openai_compatible_providers_request_carries_the_image_as_a_data_url() {
    let chunks = [openai_delta(json!({"content": "a cat"})), openai_finish("stop")];
    let mut fake =
        Fake::start(vec![Reply::Stream { pieces: vec![openai_sse(&chunks).into_bytes()], end: End::Complete }]).await;
    let server = common::provider_server(&fake, "sk-test-key-123456").await;
    let session = session(&server).await;
    let (_, file) = upload(&server, None, "shot.png", PNG).await;
    let run =
        prompt(&server, &session, json!({"text": "what is it?", "parts": [{"type": "file", "id": file["id"]}]})).await;
    assert_eq!(run["status"], "completed", "{run}");
    let body = fake.request().await.body;
    let user = body["messages"].as_array().expect("messages").iter().rfind(|m| m["role"] == "user").expect("user");
    use base64::Engine as _;
    let data = format!("data:image/png;base64,{}", base64::engine::general_purpose::STANDARD.encode(PNG));
    assert_eq!(
        user["content"],
        json!([{"type": "image_url", "image_url": {"url": data}}, {"type": "text", "text": "what is it?"}])
    );
}

#[tokio::test]
async fn an_anthropic_request_carries_the_image_as_an_image_block() {
    let events = [
        json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "content": [],
               "model": "claude-test", "stop_reason": null, "stop_sequence": null,
               "usage": {"input_tokens": 5, "output_tokens": 1}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "a cat"}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null}, "usage": {"output_tokens": 2}}),
        json!({"type": "message_stop"}),
    ];
    let sse: String =
        events.iter().map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().expect("type"))).collect();
    let mut fake = Fake::start(vec![Reply::Stream { pieces: vec![sse.into_bytes()], end: End::Complete }]).await;
    let mut config = spool_model::AnthropicConfig::new("sk-ant-test", "claude-test");
    config.base_url = fake.base_url.clone();
    let model = Arc::new(spool_model::AnthropicModel::new(config).expect("model"));
    let models = Models::new(Arc::new(ScriptedModel::default())).with(model, None, true);
    let options = TestOptions { models: Some(common::ModelsOverride(models)), ..TestOptions::default() };
    let server = TestServer::start_with(options).await;
    let session = session(&server).await;
    let (_, file) = upload(&server, None, "shot.png", PNG).await;
    let run =
        prompt(&server, &session, json!({"text": "what is it?", "parts": [{"type": "file", "id": file["id"]}]})).await;
    assert_eq!(run["status"], "completed", "{run}");
    let body = fake.request().await.body;
    use base64::Engine as _;
    let data = base64::engine::general_purpose::STANDARD.encode(PNG);
    assert_eq!(
        body["messages"][0]["content"],
        json!([
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}},
            {"type": "text", "text": "what is it?"},
        ])
    );
}

#[tokio::test]
async fn a_forked_session_keeps_its_files_after_the_source_is_deleted() {
    let server = TestServer::start().await;
    let source = session(&server).await;
    let (_, file) = upload(&server, None, "shot.png", PNG).await;
    prompt(&server, &source, json!({"text": "echo: a", "parts": [{"type": "file", "id": file["id"]}]})).await;
    let (status, fork) = server.post(&format!("/api/sessions/{source}/fork"), json!({})).await;
    assert_eq!(status, StatusCode::CREATED, "{fork}");
    let fork = id_of(&fork);
    let (status, _) = server.delete(&format!("/api/sessions/{source}")).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(stored_files(&server), [file["sha256"].as_str().expect("sha")], "the fork holds the blob");

    // The fork's next model call still carries the file's bytes.
    let run = prompt(&server, &fork, json!({"text": "echo: again"})).await;
    assert_eq!(run["status"], "completed", "{run}");
    let (status, _) = server.delete(&format!("/api/sessions/{fork}")).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert!(stored_files(&server).is_empty(), "{:?}", stored_files(&server));
}

/// A prompt that parks its run at an approval: the session stays busy until it is decided.
const PARKS: &str = "tool: write {\"path\": \"a.txt\", \"content\": \"x\"}";

async fn approve(server: &TestServer, session: &str, approval: &Value) {
    let path = format!("/api/sessions/{session}/approvals/{}", id_of(approval));
    let (status, body) = server.post(&path, json!({"decision": "once"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

/// Waits until the session has `n` runs and all are settled; returns them, oldest first.
async fn settled_runs(server: &TestServer, session: &str, n: usize) -> Vec<Value> {
    let deadline = tokio::time::Instant::now() + common::WAIT;
    loop {
        let (status, runs) = server.get(&format!("/api/sessions/{session}/runs")).await;
        assert_eq!(status, StatusCode::OK, "{runs}");
        let runs = runs.as_array().cloned().unwrap_or_default();
        let settled = |r: &Value| matches!(r["status"].as_str(), Some("completed" | "failed" | "cancelled"));
        if runs.len() == n && runs.iter().all(settled) {
            return runs;
        }
        assert!(tokio::time::Instant::now() < deadline, "the session's runs never settled: {runs:?}");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// The scripted model's line for `file` (an upload's answer), the bytes it got matching.
fn received(file: &Value) -> String {
    let sha = file["sha256"].as_str().expect("sha256");
    format!(
        "Received {} ({}, {} bytes, sha256 {}…, bytes match)",
        file["name"].as_str().expect("name"),
        file["mediaType"].as_str().expect("mediaType"),
        file["size"],
        &sha[..8]
    )
}

#[tokio::test]
async fn a_prompt_with_a_file_queued_behind_a_run_reaches_the_model_once_that_run_settles() {
    let server = TestServer::start().await;
    let session = session(&server).await;
    let (_, file) = upload(&server, None, "shot.png", PNG).await;
    let (_, approval) = server.park(&session, PARKS).await;

    let body = json!({"text": "echo: later", "parts": [{"type": "file", "id": file["id"]}], "multitask": "enqueue"});
    let (status, queued) = server.post(&format!("/api/sessions/{session}/prompt"), body).await;
    assert_eq!((status, &queued["queued"]), (StatusCode::ACCEPTED, &json!(true)), "{queued}");
    // The queue shows the file beside the text, and the upload is the session's now.
    let (_, detail) = server.get(&format!("/api/sessions/{session}")).await;
    let waiting = &detail["state"]["queue"][0];
    assert_eq!((&waiting["text"], &waiting["files"][0]["name"]), (&json!("echo: later"), &json!("shot.png")));
    let (status, refused) = server.delete(&format!("/api/uploads/{}", id_of(&file))).await;
    assert_eq!((status, &refused["error"]["code"]), (StatusCode::CONFLICT, &json!("attachment_in_use")));

    approve(&server, &session, &approval).await;
    let runs = settled_runs(&server, &session, 2).await;
    assert_eq!(runs[1]["status"], "completed", "{runs:?}");
    let answer = text_of(&last(&server, &session, "assistant").await);
    assert_eq!(answer, format!("{}\nlater", received(&file)));
    // History: the queued message's id, the file before the text.
    let user = last(&server, &session, "user").await;
    assert_eq!(user["id"], queued["messageId"], "{user}");
    assert_eq!(user["content"][0]["type"], "file", "{user}");
    assert_eq!(user["content"][0]["sha256"], file["sha256"]);
    assert_eq!(user["content"][1], json!({"type": "text", "text": "echo: later"}));
}

#[tokio::test]
async fn a_steer_with_a_file_enters_the_run_and_the_model_reads_it() {
    let server = TestServer::start().await;
    let session = session(&server).await;
    let (_, file) = upload(&server, None, "notes.md", b"# steer here\n").await;
    let (run, approval) = server.park(&session, PARKS).await;

    let body = json!({"text": "echo: steered", "parts": [{"type": "file", "id": file["id"]}]});
    let (status, steered) = server.post(&format!("/api/sessions/{session}/steer"), body).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{steered}");
    approve(&server, &session, &approval).await;
    let done = server.wait_run(&run).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(settled_runs(&server, &session, 1).await.len(), 1, "the parked run took it: no run of its own");

    let answer = text_of(&last(&server, &session, "assistant").await);
    assert_eq!(answer, format!("{}\nsteered", received(&file)));
    let user = last(&server, &session, "user").await;
    assert_eq!(user["id"], steered["messageId"], "{user}");
    assert_eq!(user["content"][0]["name"], "notes.md", "{user}");
    assert_eq!(user["content"][1], json!({"type": "text", "text": "echo: steered"}));

    // A steer of nothing at all is still refused.
    let (status, refused) =
        server.post(&format!("/api/sessions/{session}/steer"), json!({"text": " ", "parts": []})).await;
    assert_eq!((status, &refused["error"]["code"]), (StatusCode::BAD_REQUEST, &json!("empty_prompt")));
}

#[tokio::test]
async fn deleting_an_upload_removes_it_unless_sent_and_only_for_its_owner() {
    let server = TestServer::start().await;
    let (_, alice) = server.engine.auth().create_token("alice").await.expect("alice");
    let (_, bob) = server.engine.auth().create_token("bob").await.expect("bob");
    let delete = |token: &str, id: &str| {
        let request = server.client.delete(server.url(&format!("/api/uploads/{id}"))).bearer_auth(token);
        server.send(request)
    };
    let (_, notes) = upload(&server, Some(&alice), "notes.txt", b"alice's notes\n").await;
    let (_, twin) = upload(&server, Some(&alice), "again.txt", b"alice's notes\n").await;
    let (_, shot) = upload(&server, Some(&alice), "shot.png", PNG).await;
    let sha = |f: &Value| f["sha256"].as_str().expect("sha256").to_owned();
    let mut blobs = vec![sha(&notes), sha(&shot)];
    blobs.sort();

    // Bob cannot tell it from an unknown id, and it stays.
    let (status, answer) = delete(&bob, &id_of(&notes)).await;
    assert_eq!((status, &answer["error"]["code"]), (StatusCode::NOT_FOUND, &json!("not_found")));
    let (status, _) = delete(&alice, "att_01jd0000000000000000000000").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let mut stored = stored_files(&server);
    stored.sort();
    assert_eq!(stored, blobs);

    // Alice's ✕: the row goes; the blob stays while her second upload of the same bytes does.
    let (status, _) = delete(&alice, &id_of(&notes)).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let id: spool_protocol::AttachmentId = id_of(&notes).parse().expect("id");
    use spool_engine::store::prelude::*;
    assert_eq!(server.store.get_attachment(&id).await.expect("get"), None, "no row");
    let res = server.client.get(server.url(notes["url"].as_str().expect("url"))).bearer_auth(&alice).send().await;
    assert_eq!(res.expect("download").status(), StatusCode::NOT_FOUND);
    assert!(stored_files(&server).contains(&sha(&notes)), "the other upload still names the blob");
    let (status, _) = delete(&alice, &id_of(&twin)).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(stored_files(&server), [sha(&shot)], "no row names the blob: it is gone");
    let (status, _) = delete(&alice, &id_of(&twin)).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "deleted once");

    // Sent with a prompt, it belongs to the session now.
    let project = {
        let request = server.client.post(server.url("/api/projects")).bearer_auth(&alice);
        let (status, project) = server.send(request.json(&json!({"path": server.project_dir()}))).await;
        assert_eq!(status, StatusCode::CREATED, "{project}");
        id_of(&project)
    };
    let request = server.client.post(server.url("/api/sessions")).bearer_auth(&alice);
    let (_, session) = server.send(request.json(&json!({"projectId": project, "title": "files"}))).await;
    let body = json!({"text": "echo: ok", "parts": [{"type": "file", "id": shot["id"]}]});
    let request = server.client.post(server.url(&format!("/api/sessions/{}/prompt", id_of(&session))));
    let (status, accepted) = server.send(request.bearer_auth(&alice).json(&body)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
    let (status, refused) = delete(&alice, &id_of(&shot)).await;
    assert_eq!((status, &refused["error"]["code"]), (StatusCode::CONFLICT, &json!("attachment_in_use")), "{refused}");
    assert_eq!(stored_files(&server), [sha(&shot)]);
}

/// Whether `file`'s URL gives its bytes back.
async fn readable(server: &TestServer, file: &Value) -> bool {
    let url = server.url(file["url"].as_str().expect("url"));
    server.client.get(url).send().await.expect("download").status() == StatusCode::OK
}

#[tokio::test]
async fn uploads_never_sent_expire_after_a_day_and_sent_or_fresh_ones_stay() {
    let clock = spool_engine::ManualClock::starting_now();
    let engine = EngineConfig { clock: clock.clone().into(), ..EngineConfig::default() };
    let server = TestServer::start_with(TestOptions { engine, ..TestOptions::default() }).await;
    let session = session(&server).await;
    let (_, old) = upload(&server, None, "old.txt", b"left in the composer\n").await;
    let (_, sent) = upload(&server, None, "shot.png", PNG).await;
    let run =
        prompt(&server, &session, json!({"text": "echo: ok", "parts": [{"type": "file", "id": sent["id"]}]})).await;
    assert_eq!(run["status"], "completed", "{run}");

    // A minute short of a day: nothing goes.
    clock.advance(std::time::Duration::from_secs(24 * 3600 - 60));
    let (_, fresh) = upload(&server, None, "fresh.txt", b"just attached\n").await;
    server.engine.attachments().sweep().await;
    assert!(readable(&server, &old).await, "not a day old yet");
    assert_eq!(stored_files(&server).len(), 3);

    clock.advance(std::time::Duration::from_secs(120));
    server.engine.attachments().sweep().await;
    assert!(!readable(&server, &old).await, "a day old and never sent: gone");
    assert!(
        readable(&server, &sent).await && readable(&server, &fresh).await,
        "sent with a prompt, or uploaded since, it stays"
    );
    let mut stored = stored_files(&server);
    stored.sort();
    let mut kept = [sent["sha256"].as_str().expect("sha"), fresh["sha256"].as_str().expect("sha")];
    kept.sort();
    assert_eq!(stored, kept, "the expired upload's blob is removed with its row");
}

#[tokio::test]
async fn the_model_list_says_which_files_each_model_reads() {
    let text_only = spool_model::from_spec("scripted:text-only", &|_| None).expect("a spec");
    let models = Models::new(Arc::new(ScriptedModel::default())).with(text_only, None, false);
    let options = TestOptions { models: Some(common::ModelsOverride(models)), ..TestOptions::default() };
    let server = TestServer::start_with(options).await;
    let (status, list) = server.get("/api/models").await;
    assert_eq!(status, StatusCode::OK, "{list}");
    let inputs: Vec<(String, Value)> = list["models"]
        .as_array()
        .expect("models")
        .iter()
        .map(|m| (m["name"].as_str().expect("name").to_owned(), m["inputs"].clone()))
        .collect();
    assert_eq!(
        inputs,
        [
            ("scripted".to_owned(), json!({"images": true, "pdf": true})),
            ("scripted:text-only".to_owned(), json!({"images": false, "pdf": false})),
        ]
    );
}
