//! `spool serve --tls-cert --tls-key` as a person runs it, with a certificate made here:
//! the API answers over HTTP/2, many session streams share one connection and each
//! delivers its answer, the login cookie is `Secure`, plain HTTP to the TLS port is
//! answered with a plain refusal while the server goes on serving, and a wrong key file
//! stops the start with an error that names it.

use crate::common;

use common::{SseStream, WAIT, call, serve, spool};
use reqwest::{StatusCode, Version};
use serde_json::json;
use spool_protocol::frame::{Frame, FrameBody};
use spool_protocol::{AgentEvent, StreamDelta};
use std::path::{Path, PathBuf};

/// A self-signed certificate for 127.0.0.1 and its key, as PEM files in `dir`; returns
/// their paths and the certificate's PEM (for the client to trust).
pub(crate) fn certificate(dir: &Path) -> (PathBuf, PathBuf, String) {
    let made = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
        .expect("make a certificate");
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert, made.cert.pem()).expect("write the certificate");
    std::fs::write(&key, made.signing_key.serialize_pem()).expect("write the key");
    (cert, key, made.cert.pem())
}

/// A client that trusts only `pem` and speaks HTTP/2 when the server offers it.
fn client(pem: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .add_root_certificate(reqwest::Certificate::from_pem(pem.as_bytes()).expect("PEM"))
        .build()
        .expect("client")
}

struct Tls {
    dir: tempfile::TempDir,
    cert: PathBuf,
    key: PathBuf,
    pem: String,
}

impl Tls {
    fn new() -> Tls {
        let dir = tempfile::tempdir().expect("temp dir");
        let (cert, key, pem) = certificate(dir.path());
        Tls { dir, cert, key, pem }
    }

    /// `spool serve` on a free port with this certificate and extra args: the server and
    /// its `https://HOST:PORT`.
    fn serve(&self, extra: &[&str]) -> (common::Spool, String) {
        let data = self.dir.path().join("data");
        let mut args = vec!["--addr", "127.0.0.1:0", "--data-dir", data.to_str().expect("UTF-8")];
        args.extend_from_slice(&["--tls-cert", self.cert.to_str().expect("UTF-8")]);
        args.extend_from_slice(&["--tls-key", self.key.to_str().expect("UTF-8")]);
        args.extend_from_slice(extra);
        serve(&args)
    }
}

/// SIGTERM and a clean exit, waited for off this runtime's thread: a graceful HTTP/2
/// shutdown waits for the client to answer a PING, which a blocked thread cannot.
async fn stop(server: common::Spool) {
    tokio::task::spawn_blocking(move || server.stop()).await.expect("stopped");
}

/// The open HTTP connections the server counts in `/metrics`.
async fn open_http_connections(client: &reqwest::Client, base: &str) -> u64 {
    let text = client.get(format!("{base}/metrics")).send().await.expect("metrics").text().await.expect("text");
    let line = text.lines().find(|l| l.starts_with("spool_open_connections{kind=\"http\"}")).expect("the gauge");
    line.rsplit(' ').next().and_then(|n| n.parse().ok()).expect("a count")
}

/// Reads a session stream until its run settles; returns the streamed text.
async fn answer(res: reqwest::Response) -> String {
    let mut stream = SseStream::new(res).with_wait(WAIT);
    let mut text = String::new();
    loop {
        let Some(event) = stream.next_event().await else {
            panic!("the stream ended before the run settled; got {text:?}");
        };
        let Ok(frame) = serde_json::from_str::<Frame>(&event.data) else { continue };
        match frame.body {
            FrameBody::LoopEvent {
                event: AgentEvent::MessageUpdate { assistant_message_event: StreamDelta::TextDelta { delta, .. } },
                ..
            } => text.push_str(&delta),
            FrameBody::LoopEvent { event: AgentEvent::AgentSettled {}, .. } => return text,
            _ => {}
        }
    }
}

#[tokio::test]
async fn the_api_and_many_session_streams_share_one_http2_connection() {
    let tls = Tls::new();
    let (server, base) = tls.serve(&[]);
    assert!(base.starts_with("https://127.0.0.1:"), "{base}");
    let client = client(&tls.pem);

    let health = client.get(format!("{base}/api/health")).send().await.expect("health over TLS");
    assert_eq!(health.status(), StatusCode::OK);
    assert_eq!(health.version(), Version::HTTP_2, "the client offered h2 and the server took it");

    let project_dir = tls.dir.path().join("project");
    std::fs::create_dir_all(&project_dir).expect("project dir");
    let project = call(client.post(format!("{base}/api/projects")).json(&json!({"path": project_dir}))).await;
    // Ten streams at once: over HTTP/1.1 a browser would stop at six per host.
    let mut sessions = Vec::new();
    let mut streams = Vec::new();
    for _ in 0..10 {
        let session =
            call(client.post(format!("{base}/api/sessions")).json(&json!({"projectId": project["id"]}))).await;
        let id = session["id"].as_str().expect("id").to_owned();
        let res = client.get(format!("{base}/api/sessions/{id}/events")).send().await.expect("open a stream");
        assert_eq!((res.status(), res.version()), (StatusCode::OK, Version::HTTP_2));
        sessions.push(id);
        streams.push(res);
    }
    assert_eq!(open_http_connections(&client, &base).await, 1, "ten streams and the API on one connection");

    for (i, id) in sessions.iter().enumerate() {
        let prompt = json!({"text": format!("echo: answer number {i} over h2")});
        call(client.post(format!("{base}/api/sessions/{id}/prompt")).json(&prompt)).await;
    }
    let answers = futures::future::join_all(streams.into_iter().map(answer)).await;
    for (i, text) in answers.iter().enumerate() {
        assert_eq!(text, &format!("answer number {i} over h2"), "stream {i}");
    }
    stop(server).await;
}

#[tokio::test]
async fn the_login_cookie_is_secure_over_tls() {
    let tls = Tls::new();
    let data = tls.dir.path().join("data");
    let made = spool().args(["token", "create", "--user", "alice", "--data-dir"]).arg(&data).output().expect("run");
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let secret = String::from_utf8(made.stdout).expect("UTF-8").trim().to_owned();
    let (server, base) = tls.serve(&[]);
    let login = client(&tls.pem)
        .post(format!("{base}/api/login"))
        .json(&json!({"token": secret}))
        .send()
        .await
        .expect("log in");
    assert_eq!(login.status(), StatusCode::OK);
    let cookie = login.headers()["set-cookie"].to_str().expect("ASCII").to_owned();
    assert!(cookie.split("; ").any(|part| part == "Secure"), "{cookie}");
    stop(server).await;
}

#[tokio::test]
async fn plain_http_to_the_tls_port_is_refused_and_the_server_keeps_serving() {
    let tls = Tls::new();
    let (server, base) = tls.serve(&[]);
    let plain = base.replacen("https://", "http://", 1);
    let refused = reqwest::Client::builder().no_proxy().build().expect("client");
    let res = refused.get(format!("{plain}/api/health")).send().await.expect("a plain answer");
    assert_eq!(res.status(), StatusCode::BAD_REQUEST);
    let body = res.text().await.expect("text");
    assert!(body.contains("use https://"), "{body}");

    let health = client(&tls.pem).get(format!("{base}/api/health")).send().await.expect("health over TLS");
    assert_eq!(health.status(), StatusCode::OK);
    stop(server).await;
}

#[test]
fn a_key_that_is_not_the_certificates_stops_the_start_naming_the_file() {
    let tls = Tls::new();
    let other = tempfile::tempdir().expect("temp dir");
    let (_, other_key, _) = certificate(other.path());
    let data = tls.dir.path().join("data");
    let out = spool()
        .args(["serve", "--addr", "127.0.0.1:0", "--data-dir"])
        .arg(&data)
        .arg("--tls-cert")
        .arg(&tls.cert)
        .arg("--tls-key")
        .arg(&other_key)
        .output()
        .expect("run spool");
    assert!(!out.status.success(), "refused");
    assert!(out.stdout.is_empty(), "never says it is listening: {}", String::from_utf8_lossy(&out.stdout));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(other_key.to_str().expect("UTF-8")), "names the key file: {stderr}");
    assert!(stderr.contains("does not hold the private key of the certificate"), "{stderr}");

    // One of the pair alone is refused too, naming the one that is missing.
    let out = spool()
        .args(["serve", "--addr", "127.0.0.1:0", "--data-dir"])
        .arg(&data)
        .env("SPOOL_TLS_CERT", &tls.cert)
        .output()
        .expect("run spool");
    assert!(!out.status.success(), "refused");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--tls-cert needs --tls-key"));
}
