//! Auth as a person runs it: `spool token …` and `spool auth …` in processes of their
//! own beside a running `spool serve`, which shares only the store with them.
//!
//! Revoking the last token leaves auth on (only `spool auth disable` turns it off, and
//! not while a server listens on a non-loopback address), and a revocation made by
//! the CLI closes the token's open streams — SSE and WebSocket, opened with the token
//! or with a login cookie made from it — on every server of the store, SQLite or
//! PostgreSQL. The streams are awaited with a generous bound; how long they took is
//! printed, not asserted (the server polls the store every 500 ms).

use crate::common;

use common::{Spool, TestDb, WAIT, call, serve, spool, wait_for};
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// The flags naming a store: a SQLite data dir, or PostgreSQL plus a data dir.
fn store_flags(data: &std::path::Path, url: Option<&str>) -> Vec<String> {
    let mut flags = vec!["--data-dir".to_owned(), data.to_string_lossy().into_owned()];
    if let Some(url) = url {
        flags.extend(["--database-url".to_owned(), url.to_owned()]);
    }
    flags
}

/// Runs `spool ARGS… STORE_FLAGS…` to completion: (success, stdout, stderr).
fn cli(args: &[&str], store: &[String]) -> (bool, String, String) {
    let out = spool().args(args).args(store).output().expect("run spool");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn create_token(user: &str, store: &[String]) -> (String, String) {
    let (ok, secret, stderr) = cli(&["token", "create", "--user", user], store);
    assert!(ok, "{stderr}");
    let (ok, listed, _) = cli(&["token", "list"], store);
    assert!(ok);
    let id = listed
        .lines()
        .find(|l| l.contains(&format!("\t{user}\t")))
        .and_then(|l| l.split('\t').next())
        .expect("the token is listed")
        .to_owned();
    (id, secret.trim().to_owned())
}

fn start(addr: &str, store: &[String], extra: &[&str]) -> (Spool, String) {
    // With tokens, projects only go under a project root: the tests' project
    // directories are temporary directories.
    let temp = std::env::temp_dir();
    let root = temp.to_str().expect("UTF-8 temp dir");
    let mut args: Vec<&str> = vec!["--addr", addr, "--workspace-root", root];
    args.extend(store.iter().map(String::as_str));
    args.extend_from_slice(extra);
    serve(&args)
}

async fn status(client: &reqwest::Client, url: &str, token: Option<&str>) -> StatusCode {
    let mut req = client.get(url);
    if let Some(token) = token {
        req = req.bearer_auth(token);
    }
    req.send().await.expect("request").status()
}

#[tokio::test]
async fn revoking_the_last_token_keeps_auth_on_until_auth_disable() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = store_flags(&dir.path().join("data"), None);
    let (id, secret) = create_token("alice", &store);
    let (server, base) = start("127.0.0.1:0", &store, &[]);
    let client = reqwest::Client::builder().no_proxy().build().expect("client");
    let projects = format!("{base}/api/projects");
    assert_eq!(status(&client, &projects, Some(&secret)).await, StatusCode::OK);

    let (ok, _, stderr) = cli(&["token", "revoke", &id], &store);
    assert!(ok, "{stderr}");
    assert_eq!(status(&client, &projects, Some(&secret)).await, StatusCode::UNAUTHORIZED);
    assert_eq!(status(&client, &projects, None).await, StatusCode::UNAUTHORIZED);
    // A fresh start reads the store with no cache at all: still closed.
    server.stop();
    let (_server, base) = start("127.0.0.1:0", &store, &[]);
    let projects = format!("{base}/api/projects");
    assert_eq!(status(&client, &projects, None).await, StatusCode::UNAUTHORIZED);
    let auth: Value = client.get(format!("{base}/api/auth")).send().await.expect("auth").json().await.expect("json");
    assert_eq!(auth["required"], true, "the page asks for a token: {auth}");
    let (_, shown, _) = cli(&["auth", "status"], &store);
    assert!(shown.contains("auth: on") && shown.contains("active tokens: 0"), "{shown}");

    // Only a person's explicit command turns it off; the running server follows.
    let (ok, said, stderr) = cli(&["auth", "disable"], &store);
    assert!(ok, "{stderr}");
    assert!(said.contains("auth is off"), "{said}");
    let deadline = Instant::now() + WAIT;
    while status(&client, &projects, None).await != StatusCode::OK {
        assert!(Instant::now() < deadline, "auth still on {WAIT:?} after `spool auth disable`");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (_, shown, _) = cli(&["auth", "status"], &store);
    assert!(shown.contains("auth: off"), "{shown}");
}

#[tokio::test]
async fn auth_disable_is_refused_while_a_server_listens_on_a_public_address() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = store_flags(&dir.path().join("data"), None);
    let (id, _) = create_token("bob", &store);
    assert!(cli(&["token", "revoke", &id], &store).0);
    // All interfaces on an ephemeral port: nothing but loopback sends to it here.
    let (server, base) = start("0.0.0.0:0", &store, &[]);
    let (ok, _, stderr) = cli(&["auth", "disable"], &store);
    assert!(!ok, "refused while serving on {base}");
    assert!(stderr.contains("non-loopback") && stderr.contains("0.0.0.0"), "{stderr}");
    let (_, shown, _) = cli(&["auth", "status"], &store);
    assert!(shown.contains("auth: on") && shown.contains("(non-loopback)"), "{shown}");

    // Once that server has stopped, a person may turn auth off; a public bind is then
    // refused again.
    server.stop();
    let (ok, _, stderr) = cli(&["auth", "disable"], &store);
    assert!(ok, "{stderr}");
    let refused = spool().args(["serve", "--addr", "0.0.0.0:0"]).args(&store).output().expect("serve");
    assert!(!refused.status.success(), "auth off: no public bind");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("spool token create"));
}

/// An open stream, read on a thread of its own until the server ends it.
struct OpenStream {
    name: &'static str,
    ended: tokio::sync::oneshot::Receiver<String>,
}

/// Sends a raw HTTP/1.1 request and reads the response until the server closes the
/// connection; the returned receiver gets everything read once it ends. A plain
/// socket rather than an HTTP client, so it works the same for SSE and for a
/// WebSocket upgrade (after the 101, the server's frames are just bytes to skip).
fn open_raw(name: &'static str, base: &str, request: String) -> OpenStream {
    let addr = base.strip_prefix("http://").expect("http base").to_owned();
    let mut tcp = TcpStream::connect(&addr).expect("connect");
    tcp.write_all(request.replace("{host}", &addr).as_bytes()).expect("send");
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(tcp.read(&mut byte).expect("read the response head"), 1, "{name}: closed before a response");
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    assert!(head.starts_with("HTTP/1.1 200") || head.starts_with("HTTP/1.1 101"), "{name}: {head}");
    let (tx, ended) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let mut seen = Vec::new();
        let mut buf = [0u8; 8192];
        loop {
            match tcp.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
        }
        let _ = tx.send(String::from_utf8_lossy(&seen).into_owned());
    });
    OpenStream { name, ended }
}

fn get(path: &str, auth: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: {{host}}\r\n{auth}\r\n\r\n")
}

fn websocket(auth: &str) -> String {
    format!(
        "GET /api/ws HTTP/1.1\r\nHost: {{host}}\r\nOrigin: http://{{host}}\r\nUpgrade: websocket\r\n\
         Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n{auth}\r\n\r\n"
    )
}

/// Opens every kind of stream on `nodes` as the holder of a token (by header and by
/// login cookie), revokes the token with the CLI, and waits for every one to end,
/// while a stream of another user's token stays open.
async fn revocation_closes_streams(store: &[String], nodes: &[String]) {
    let (id, secret) = create_token("carol", store);
    let (_, other) = create_token("dave", store);
    let client = reqwest::Client::builder().no_proxy().build().expect("client");
    let first = &nodes[0];
    let dir = tempfile::tempdir().expect("project dir");
    let project =
        call(client.post(format!("{first}/api/projects")).bearer_auth(&secret).json(&json!({"path": dir.path()})))
            .await;
    let project_id = project["id"].as_str().expect("project id").to_owned();
    let session =
        call(client.post(format!("{first}/api/sessions")).bearer_auth(&secret).json(&json!({"projectId": project_id})))
            .await;
    let session_id = session["id"].as_str().expect("session id").to_owned();
    let encoded: String = dir
        .path()
        .to_string_lossy()
        .bytes()
        .map(|b| if b.is_ascii_alphanumeric() { (b as char).to_string() } else { format!("%{b:02X}") })
        .collect();

    let bearer = format!("Authorization: Bearer {secret}");
    let mut streams = Vec::new();
    for base in nodes {
        let login =
            client.post(format!("{base}/api/login")).json(&json!({"token": secret})).send().await.expect("login");
        assert_eq!(login.status(), StatusCode::OK);
        let cookie =
            login.headers()["set-cookie"].to_str().expect("cookie").split(';').next().expect("pair").to_owned();
        let cookie = format!("Cookie: {cookie}");
        let events = format!("/api/sessions/{session_id}/events");
        streams.push(open_raw("session stream (token)", base, get(&events, &bearer)));
        streams.push(open_raw("session stream (cookie)", base, get(&events, &cookie)));
        streams.push(open_raw("list stream (token)", base, get("/api/workspaces/events", &bearer)));
        streams.push(open_raw("list stream (cookie)", base, get("/api/workspaces/events", &cookie)));
        streams.push(open_raw("OpenCode /event (token)", base, get(&format!("/event?directory={encoded}"), &bearer)));
        streams.push(open_raw("WebSocket (token)", base, websocket(&bearer)));
        streams.push(open_raw("WebSocket (cookie)", base, websocket(&cookie)));
    }
    // A run stream of a run that would go on for half an hour.
    let body = json!({"sessionId": session_id, "text": "stream: 100000"}).to_string();
    let chat = format!(
        "POST /api/chat HTTP/1.1\r\nHost: {{host}}\r\n{bearer}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    streams.push(open_raw("run stream /api/chat (token)", first, chat));
    let mut control = open_raw(
        "another user's list stream",
        first,
        get("/api/workspaces/events", &format!("Authorization: Bearer {other}")),
    );

    let revoked_at = Instant::now();
    let (ok, _, stderr) = cli(&["token", "revoke", &id], store);
    assert!(ok, "{stderr}");
    for stream in streams {
        let seen = tokio::time::timeout(Duration::from_secs(10), stream.ended)
            .await
            .unwrap_or_else(|_| panic!("{} still open 10 s after the revocation", stream.name))
            .expect("reader thread");
        assert!(!seen.contains("\"done\""), "{}: ended by its run finishing, not by the revocation", stream.name);
        // A note for the reader of the test log, not an assertion: timing belongs to benchmarks.
        eprintln!("{} closed {:?} after `spool token revoke` was started", stream.name, revoked_at.elapsed());
    }
    assert!(control.ended.try_recv().is_err(), "another token's stream stays open");
    assert_eq!(status(&client, &format!("{first}/api/projects"), Some(&secret)).await, StatusCode::UNAUTHORIZED);
    assert_eq!(status(&client, &format!("{first}/api/projects"), Some(&other)).await, StatusCode::OK);
}

#[tokio::test]
async fn a_token_revoked_by_the_cli_has_its_streams_closed_sqlite() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = store_flags(&dir.path().join("data"), None);
    let (_server, base) = start("127.0.0.1:0", &store, &["--scripted-delay-ms", "20"]);
    revocation_closes_streams(&store, &[base]).await;
}

#[cfg_attr(not(spool_postgres), ignore = "needs PostgreSQL: set SPOOL_TEST_DATABASE_URL")]
#[tokio::test]
async fn a_token_revoked_by_the_cli_has_its_streams_closed_on_every_postgres_node() {
    let db = TestDb::create().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let store = store_flags(&dir.path().join("data"), Some(&db.url));
    let extra = ["--scripted-delay-ms", "20"];
    let (_a, a) = start("127.0.0.1:0", &store, &[&extra[..], &["--node-id", "a"]].concat());
    let (_b, b) = start("127.0.0.1:0", &store, &[&extra[..], &["--node-id", "b"]].concat());
    // Both nodes must know auth is on before the streams open (each re-reads once a second).
    let client = reqwest::Client::builder().no_proxy().build().expect("client");
    let (_, _) = create_token("erin", &store);
    for base in [&a, &b] {
        wait_for(&client, &format!("{base}/api/auth"), WAIT, |auth| auth["required"] == true).await;
    }
    revocation_closes_streams(&store, &[a, b]).await;
}
