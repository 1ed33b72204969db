//! Project roots and the data directory, through a real server: a token holder
//! registers projects only under their roots (403 `outside_roots`, the same answer for
//! a path that exists and one that does not), never the data directory or anything
//! holding it (403 `data_dir`), in the native API and the OpenCode dialect; a project
//! left from before those rules runs no tools; with auth off any directory goes.

use crate::common;

use common::{TestOptions, TestServer, id_of, urlencode};
use reqwest::StatusCode;
use serde_json::{Value, json};
use spool_engine::EngineConfig;
use spool_engine::store::Projects;
use spool_protocol::{Project, ProjectId, UserId};
use std::path::Path;

async fn register(server: &TestServer, token: Option<&str>, path: &str) -> (StatusCode, Value) {
    let mut request = server.client.post(server.url("/api/projects")).json(&json!({ "path": path }));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    server.send(request).await
}

fn text(path: &Path) -> &str {
    path.to_str().expect("utf-8 temp path")
}

/// Stores a project row directly, as a server before these rules would have.
async fn legacy_project(server: &TestServer, owner: &UserId, path: &Path) -> String {
    let project = Project {
        id: ProjectId::new(),
        owner_id: owner.clone(),
        name: "legacy".into(),
        path: text(&path.canonicalize().expect("canonical")).to_owned(),
        created_at: 1,
        updated_at: 1,
        dir: None,
    };
    server.store.insert_project(&project).await.expect("insert project");
    project.id.to_string()
}

#[tokio::test]
async fn with_tokens_projects_outside_the_roots_get_one_answer_whether_or_not_they_exist() {
    // The temp directory is the root (see TestOptions::temp_dir_is_root).
    let server = TestServer::start().await;
    let (_, alice) = server.engine.auth().create_token("alice").await.expect("token");
    let outside = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir(outside.path().join("there")).expect("mkdir");
    std::fs::write(outside.path().join("secret.txt"), "s3cret").expect("write");
    let project = server.project_dir();
    std::os::unix::fs::symlink(outside.path(), project.join("escape")).expect("symlink");

    let existing = [
        "/".to_owned(),
        "/etc".to_owned(),
        text(&outside.path().join("there")).to_owned(),
        text(&outside.path().join("secret.txt")).to_owned(),
        text(&project.join("escape/there")).to_owned(),
        format!("{}/../../{}/there", text(&project), outside.path().file_name().expect("name").to_string_lossy()),
    ];
    let missing = [
        "/no-such-dir-spool-test".to_owned(),
        "/etc/no-such-dir-spool-test".to_owned(),
        text(&outside.path().join("missing")).to_owned(),
        text(&project.join("escape/missing")).to_owned(),
    ];
    let mut answers = Vec::new();
    for path in existing.iter().chain(&missing) {
        let (status, body) = register(&server, Some(&alice), path).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}: {body}");
        assert_eq!(body["error"]["code"], "outside_roots", "{path}: {body}");
        answers.push(body);
    }
    assert!(answers.windows(2).all(|w| w[0] == w[1]), "one answer for all: {answers:?}");

    // The OpenCode dialect's directory is held to the same rule.
    for path in [text(&outside.path().join("there")), text(&outside.path().join("missing")), "/etc"] {
        let request = server
            .client
            .post(server.url("/session"))
            .bearer_auth(&alice)
            .header("x-opencode-directory", urlencode(path))
            .json(&json!({}));
        let (status, body) = server.send(request).await;
        assert_eq!((status, &body["error"]), (StatusCode::FORBIDDEN, &answers[0]["error"]), "{path}");
    }
    let (_, projects) = server.send(server.client.get(server.url("/api/projects")).bearer_auth(&alice)).await;
    assert_eq!(projects, json!([]), "nothing was registered");

    // Under the root it works; a missing directory there is just missing.
    let (status, body) = register(&server, Some(&alice), text(&project)).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, body) = register(&server, Some(&alice), text(&server.dir().join("nope"))).await;
    assert_eq!((status, body["error"]["code"].as_str()), (StatusCode::BAD_REQUEST, Some("invalid_path")));
}

#[tokio::test]
async fn with_tokens_and_no_roots_registration_is_refused_saying_how_to_configure_them() {
    let server = TestServer::start_with(TestOptions { temp_dir_is_root: false, ..TestOptions::default() }).await;
    let (_, alice) = server.engine.auth().create_token("alice").await.expect("token");
    let (status, body) = register(&server, Some(&alice), text(&server.project_dir())).await;
    assert_eq!((status, body["error"]["code"].as_str()), (StatusCode::FORBIDDEN, Some("outside_roots")), "{body}");
    let message = body["error"]["message"].as_str().expect("message");
    assert!(message.contains("--workspace-root") && message.contains("[users.NAME] roots"), "{message}");
}

#[tokio::test]
async fn per_user_roots_admit_only_their_user() {
    let alices = tempfile::tempdir().expect("temp dir");
    let mut engine = EngineConfig::default();
    engine.workspace_roots.per_user.insert("alice".into(), vec![alices.path().to_path_buf()]);
    let server =
        TestServer::start_with(TestOptions { engine, temp_dir_is_root: false, ..TestOptions::default() }).await;
    let (_, alice) = server.engine.auth().create_token("alice").await.expect("token");
    let (_, bob) = server.engine.auth().create_token("bob").await.expect("token");
    let (status, body) = register(&server, Some(&alice), text(alices.path())).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, body) = register(&server, Some(&bob), text(alices.path())).await;
    assert_eq!((status, body["error"]["code"].as_str()), (StatusCode::FORBIDDEN, Some("outside_roots")), "{body}");
    let (status, body) = register(&server, Some(&alice), text(&server.project_dir())).await;
    assert_eq!((status, body["error"]["code"].as_str()), (StatusCode::FORBIDDEN, Some("outside_roots")), "{body}");
}

#[tokio::test]
async fn with_auth_off_any_directory_goes_but_never_the_data_directory() {
    let server = TestServer::start_with(TestOptions { temp_dir_is_root: false, ..TestOptions::default() }).await;
    let elsewhere = tempfile::tempdir().expect("temp dir");
    let (status, body) = register(&server, None, text(elsewhere.path())).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");

    let data = server.dir().join("data");
    std::fs::create_dir_all(data.join("inner")).expect("mkdir");
    let via_dots = format!("{}/../data", text(&server.project_dir()));
    for path in ["/", text(server.dir()), text(&data), text(&data.join("inner")), &via_dots] {
        let (status, body) = register(&server, None, path).await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (StatusCode::FORBIDDEN, Some("data_dir")),
            "{path}: {body}"
        );
    }
    // Nor through the OpenCode dialect.
    let request = server
        .client
        .post(server.url("/session"))
        .header("x-opencode-directory", urlencode(text(server.dir())))
        .json(&json!({}));
    let (status, body) = server.send(request).await;
    assert_eq!((status, body["error"]["code"].as_str()), (StatusCode::FORBIDDEN, Some("data_dir")), "{body}");
}

/// A project registered before the rules (here: written to the store directly) that
/// holds the data directory keeps its history but runs nothing: a `grep` there used to
/// open the live `spool.db` inside the server and print what it holds.
#[tokio::test]
async fn a_project_holding_the_data_directory_runs_no_tools() {
    let server = TestServer::start_with(TestOptions { temp_dir_is_root: false, ..TestOptions::default() }).await;
    let project = legacy_project(&server, server.engine.local_user(), server.dir()).await;
    let (status, session) = server.post("/api/sessions", json!({ "projectId": project })).await;
    assert_eq!(status, StatusCode::CREATED, "{session}");
    let session = id_of(&session);
    let (status, body) = server.prompt(&session, "tool: grep {\"pattern\": \"CREATE TABLE\"}", None).await;
    assert_eq!((status, body["error"]["code"].as_str()), (StatusCode::FORBIDDEN, Some("data_dir")), "{body}");
    let (status, _) = server.get(&format!("/api/sessions/{session}")).await;
    assert_eq!(status, StatusCode::OK, "the session is still there to read or delete");
}

/// Likewise a project outside the roots configured after it was registered.
#[tokio::test]
async fn a_project_outside_roots_configured_later_runs_no_tools() {
    let server = TestServer::start().await;
    let (_, alice) = server.engine.auth().create_token("alice").await.expect("token");
    let alice_id = server.engine.auth().authenticate(&alice).await.expect("auth").expect("alice");
    let outside = tempfile::tempdir().expect("temp dir");
    let project = legacy_project(&server, &alice_id, outside.path()).await;
    let request =
        server.client.post(server.url("/api/sessions")).bearer_auth(&alice).json(&json!({ "projectId": project }));
    let (status, session) = server.send(request).await;
    assert_eq!(status, StatusCode::CREATED, "{session}");
    let request = server
        .client
        .post(server.url(&format!("/api/sessions/{}/prompt", id_of(&session))))
        .bearer_auth(&alice)
        .json(&json!({ "text": "tool: list {}" }));
    let (status, body) = server.send(request).await;
    assert_eq!((status, body["error"]["code"].as_str()), (StatusCode::FORBIDDEN, Some("outside_roots")), "{body}");
}

/// Inside an allowed project, a tool path that leads into the data directory through
/// a symlink is refused like any path outside the project.
#[tokio::test]
async fn tool_paths_into_the_data_directory_are_refused() {
    let server = TestServer::start().await;
    std::os::unix::fs::symlink(server.dir().join("data"), server.project_dir().join("data-link")).expect("symlink");
    let session = server.new_session().await;
    for args in [
        json!({"path": "data-link/spool.db"}),
        json!({"path": "../data/spool.db"}),
        json!({"path": text(&server.dir().join("data/spool.db"))}),
    ] {
        let run = server.run_prompt(&session, &format!("tool: read {args}")).await;
        assert_eq!(run["status"], "completed", "{run}");
        let page = server.messages(&session, "").await;
        let shown = page.to_string();
        assert!(shown.contains("outside the project directory"), "{args}: {shown}");
        assert!(!shown.contains("SQLite format"), "{args}: the database was read");
    }
}
