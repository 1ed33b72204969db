//! Two users' tokens sharing one `--workspace-root`, through a real server: a directory
//! one user registered is not another's. Bob cannot register alice's project directory,
//! a directory inside it, a directory holding it, the root itself, or her directory
//! under another name (a symbolic link inside the root); alice still registers her own,
//! and bob his own beside hers.

use crate::common;

use common::{TestOptions, TestServer};
use reqwest::StatusCode;
use serde_json::{Value, json};
use spool_engine::EngineConfig;

async fn register(server: &TestServer, token: &str, path: &std::path::Path) -> (StatusCode, Value) {
    let request = server.client.post(server.url("/api/projects")).bearer_auth(token).json(&json!({ "path": path }));
    server.send(request).await
}

/// A server whose one `--workspace-root` every user has, apart from its data directory:
/// the temp dir holding it (kept alive by the caller), its canonical path, the server.
async fn serve_with_a_shared_root() -> (tempfile::TempDir, std::path::PathBuf, TestServer) {
    let shared = tempfile::tempdir().expect("temp dir");
    let root = shared.path().canonicalize().expect("canonical");
    let mut engine = EngineConfig::default();
    engine.workspace_roots.global.push(root.clone());
    let server =
        TestServer::start_with(TestOptions { engine, temp_dir_is_root: false, ..TestOptions::default() }).await;
    (shared, root, server)
}

#[tokio::test]
async fn a_directory_another_user_registered_or_the_shared_root_is_refused() {
    let (_shared, root, server) = serve_with_a_shared_root().await;
    let (_, alice) = server.engine.auth().create_token("alice").await.expect("token");
    let (_, bob) = server.engine.auth().create_token("bob").await.expect("token");
    let dir = |name: &str| {
        let path = root.join(name);
        std::fs::create_dir_all(&path).expect("mkdir");
        path
    };
    let (team, alices, inner) = (dir("team"), dir("team/alice"), dir("team/alice/src"));
    std::os::unix::fs::symlink(&alices, root.join("alias")).expect("symlink");

    let (status, body) = register(&server, &alice, &alices).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");

    for (path, code, status) in [
        (&alices, "directory_taken", StatusCode::FORBIDDEN),
        (&inner, "directory_taken", StatusCode::FORBIDDEN),
        (&team, "directory_taken", StatusCode::FORBIDDEN),
        (&root.join("alias"), "directory_taken", StatusCode::FORBIDDEN),
        (&root, "shared_root", StatusCode::FORBIDDEN),
    ] {
        let (got, body) = register(&server, &bob, path).await;
        assert_eq!((got, body["error"]["code"].as_str()), (status, Some(code)), "{path:?}: {body}");
        assert!(body["error"]["message"].as_str().is_some_and(|m| m.contains("user")), "{body}");
    }
    let (_, projects) = server.send(server.client.get(server.url("/api/projects")).bearer_auth(&bob)).await;
    assert_eq!(projects, json!([]), "bob registered nothing");

    // Nor does the OpenCode dialect's directory header get around it.
    let request = server
        .client
        .post(server.url("/session"))
        .bearer_auth(&bob)
        .header("x-opencode-directory", common::urlencode(alices.to_str().expect("utf-8")))
        .json(&json!({}));
    let (status, body) = server.send(request).await;
    assert_eq!((status, body["error"]["code"].as_str()), (StatusCode::FORBIDDEN, Some("directory_taken")), "{body}");

    // Alice registers inside her own project too, and bob beside her.
    let (status, body) = register(&server, &alice, &inner).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let bobs = dir("team/bob");
    let (status, body) = register(&server, &bob, &bobs).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    // And now alice cannot take bob's, nor the root.
    let (status, body) = register(&server, &alice, &bobs).await;
    assert_eq!((status, body["error"]["code"].as_str()), (StatusCode::FORBIDDEN, Some("directory_taken")), "{body}");
    let (status, body) = register(&server, &alice, &root).await;
    assert_eq!((status, body["error"]["code"].as_str()), (StatusCode::FORBIDDEN, Some("shared_root")), "{body}");
}

/// Two users registering overlapping directories at the same moment: registrations are
/// checked and stored one at a time, so never both win.
#[tokio::test]
async fn two_users_racing_for_overlapping_directories_never_both_win() {
    let (_shared, root, server) = serve_with_a_shared_root().await;
    let (_, alice) = server.engine.auth().create_token("alice").await.expect("token");
    let (_, bob) = server.engine.auth().create_token("bob").await.expect("token");
    for round in 0..20 {
        let outer = root.join(format!("race{round}"));
        let inner = outer.join("inner");
        std::fs::create_dir_all(&inner).expect("mkdir");
        // Alternate who takes the outer directory, so neither always goes first.
        let (a, b) = if round % 2 == 0 { (&outer, &inner) } else { (&inner, &outer) };
        let ((sa, ba), (sb, bb)) = tokio::join!(register(&server, &alice, a), register(&server, &bob, b));
        let won = [sa, sb].iter().filter(|s| **s == StatusCode::CREATED).count();
        assert_eq!(won, 1, "round {round}: alice {sa} {ba}, bob {sb} {bb}");
    }
}

/// Overlapping projects stored before the rule (rows written directly, as an older
/// server would have): the later one runs no tools, the earlier one works on.
#[tokio::test]
async fn an_overlapping_project_from_before_the_rule_runs_nothing_the_earlier_one_does() {
    let (_shared, root, server) = serve_with_a_shared_root().await;
    let (alice_token, alice) = server.engine.auth().create_token("alice").await.expect("token");
    let (bob_token, bob) = server.engine.auth().create_token("bob").await.expect("token");
    let team = root.join("team");
    std::fs::create_dir_all(team.join("sub")).expect("mkdir");
    let legacy = |owner: &spool_protocol::UserId, path: &std::path::Path, at: i64| spool_protocol::Project {
        id: spool_protocol::ProjectId::new(),
        owner_id: owner.clone(),
        name: "legacy".into(),
        path: path.to_str().expect("utf-8").to_owned(),
        created_at: at,
        updated_at: at,
        dir: None,
    };
    let alices = legacy(&alice_token.user_id, &team, 1);
    let bobs = legacy(&bob_token.user_id, &team.join("sub"), 2);
    let bobs_root = legacy(&bob_token.user_id, &root, 3);
    for p in [&alices, &bobs, &bobs_root] {
        spool_engine::store::Projects::insert_project(&*server.store, p).await.expect("insert project");
    }
    let prompt = |token: &str, project: &spool_protocol::Project| {
        let (server, token, project) = (&server, token.to_owned(), project.id.to_string());
        async move {
            let body = json!({ "projectId": project, "title": "legacy" });
            let request = server.client.post(server.url("/api/sessions")).bearer_auth(&token).json(&body);
            let (status, session) = server.send(request).await;
            assert_eq!(status, StatusCode::CREATED, "{session}");
            let url = server.url(&format!("/api/sessions/{}/prompt", common::id_of(&session)));
            server.send(server.client.post(url).bearer_auth(&token).json(&json!({ "text": "echo: hi" }))).await
        }
    };
    let (status, body) = prompt(&bob, &bobs).await;
    assert_eq!((status, body["error"]["code"].as_str()), (StatusCode::FORBIDDEN, Some("directory_taken")), "{body}");
    let (status, body) = prompt(&bob, &bobs_root).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let (status, body) = prompt(&alice, &alices).await;
    assert_eq!(status, StatusCode::ACCEPTED, "the earlier registration works on: {body}");
}

/// One person behind a token (the usual set-up: `--workspace-root` is their project,
/// auth on to reach it from another machine) registers the root itself. A user added
/// later cannot register inside that project, and the first one's keeps running.
#[tokio::test]
async fn a_user_alone_registers_the_root_itself_and_a_later_user_cannot_get_inside() {
    let (_shared, root, server) = serve_with_a_shared_root().await;
    let (_, alice) = server.engine.auth().create_token("alice").await.expect("token");
    // A publisher is not a user: it does not make the root shared.
    server.engine.auth().create_publisher_token("news").await.expect("publisher token");
    let (status, project) = register(&server, &alice, &root).await;
    assert_eq!(status, StatusCode::CREATED, "alone, alice may register the root: {project}");

    let (_, bob) = server.engine.auth().create_token("bob").await.expect("token");
    let inner = root.join("bob");
    std::fs::create_dir(&inner).expect("mkdir");
    for path in [&root, &inner] {
        let (status, body) = register(&server, &bob, path).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path:?}: {body}");
    }
    let body = json!({ "projectId": common::id_of(&project), "title": "mine" });
    let (status, session) =
        server.send(server.client.post(server.url("/api/sessions")).bearer_auth(&alice).json(&body)).await;
    assert_eq!(status, StatusCode::CREATED, "{session}");
    let url = server.url(&format!("/api/sessions/{}/prompt", common::id_of(&session)));
    let (status, body) =
        server.send(server.client.post(url).bearer_auth(&alice).json(&json!({ "text": "echo: hi" }))).await;
    assert_eq!(status, StatusCode::ACCEPTED, "alice's root project runs on: {body}");
}
