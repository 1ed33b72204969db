//! `spool serve` as a process: it prints its address, answers, creates its data
//! directory, stops cleanly on SIGTERM, and refuses non-loopback addresses.

use crate::common;

use common::{WAIT, serve, spool};
use std::io::{Read, Write};
use std::net::TcpStream;

/// `spool serve --addr ADDR --data-dir DATA`, once it listens: the server and the
/// `HOST:PORT` it printed.
fn start(data: &std::path::Path, addr: &str) -> (common::Spool, String) {
    let data = data.to_str().expect("a UTF-8 temp path");
    let (server, base) = serve(&["--addr", addr, "--data-dir", data]);
    let addr = base.strip_prefix("http://").unwrap_or_else(|| panic!("an http:// address: {base}")).to_owned();
    (server, addr)
}

fn http_get(addr: &str, path: &str) -> String {
    let mut tcp = TcpStream::connect(addr).expect("connect");
    tcp.set_read_timeout(Some(WAIT)).expect("timeout");
    write!(tcp, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").expect("send");
    let mut response = String::new();
    tcp.read_to_string(&mut response).expect("read response");
    response
}

#[test]
fn serve_prints_its_port_answers_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().join("nested/data");
    let (server, addr) = start(&data, "127.0.0.1:0");
    assert!(!addr.ends_with(":0"), "the real port is printed: {addr}");

    let response = http_get(&addr, "/api/health");
    assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
    assert!(response.contains(r#""status":"ok""#) && response.contains(r#""model":"scripted""#), "{response}");
    assert!(data.join("spool.db").is_file(), "the data directory and database are created");

    server.stop();
}

#[test]
fn metrics_are_served_as_openmetrics_unless_turned_off() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (server, addr) = start(&dir.path().join("data"), "127.0.0.1:0");
    let response = http_get(&addr, "/metrics");
    assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
    assert!(response.contains("content-type: application/openmetrics-text; version=1.0.0"), "{response}");
    assert!(response.contains("\nspool_frames_sent_total 0\n") && response.ends_with("# EOF\n"), "{response}");
    server.stop();

    let data = dir.path().join("off");
    let data = data.to_str().expect("a UTF-8 temp path");
    let (server, base) = serve(&["--addr", "127.0.0.1:0", "--data-dir", data, "--no-metrics"]);
    let addr = base.strip_prefix("http://").expect("an http:// address");
    let response = http_get(addr, "/metrics");
    assert!(response.starts_with("HTTP/1.1 404 Not Found\r\n"), "{response}");
    server.stop();
}

#[test]
fn serve_refuses_non_loopback_addresses() {
    let dir = tempfile::tempdir().expect("temp dir");
    let output = spool()
        .arg("serve")
        .env("SPOOL_ADDR", "0.0.0.0:0")
        .env("SPOOL_DATA_DIR", dir.path().join("data"))
        .output()
        .expect("run spool");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("auth is required for non-loopback addresses"), "{stderr}");
    assert!(!dir.path().join("data").exists(), "nothing is created before the address is accepted");
}

#[test]
fn a_bad_model_spec_refuses_to_start_with_a_clear_message() {
    let dir = tempfile::tempdir().expect("temp dir");
    for (spec, expected) in [("nope:x", "nope"), ("openai:gpt-4o", "OPENAI_API_KEY")] {
        let output = spool()
            .args(["serve", "--addr", "127.0.0.1:0", "--model", spec, "--data-dir"])
            .arg(dir.path().join("data"))
            .env_remove("OPENAI_API_KEY")
            .output()
            .expect("run spool");
        assert!(!output.status.success(), "{spec}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(expected), "{spec}: {stderr}");
    }
}

#[test]
fn a_configured_model_is_the_default_and_scripted_stays_offered() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).expect("data dir");
    std::fs::write(
        data.join("config.toml"),
        "model = \"ollama:llama3\"\n[env]\nOLLAMA_BASE_URL = \"http://127.0.0.1:9/v1\"\n[prices.\"ollama:llama3\"]\ninput = 0.5\n",
    )
    .expect("config");
    let (server, addr) = start(&data, "127.0.0.1:0");
    let response = http_get(&addr, "/api/models");
    drop(server);
    assert!(response.contains(r#""default":"ollama:llama3""#), "{response}");
    assert!(response.contains(r#""configured":true"#), "{response}");
    assert!(response.contains(r#""name":"scripted""#), "{response}");
    assert!(response.contains(r#""input":0.5"#), "{response}");
}

#[test]
fn tokens_turn_auth_on_and_allow_a_public_bind() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().join("data");
    let created =
        spool().args(["token", "create", "--user", "alice", "--data-dir"]).arg(&data).output().expect("token");
    assert!(created.status.success(), "{}", String::from_utf8_lossy(&created.stderr));
    let secret = String::from_utf8_lossy(&created.stdout).trim().to_owned();
    assert!(secret.starts_with("spool_") && secret.len() > 40, "{secret}");
    let listed = spool().args(["token", "list", "--data-dir"]).arg(&data).output().expect("list");
    let listed = String::from_utf8_lossy(&listed.stdout).to_string();
    assert!(listed.contains("alice") && listed.contains("active"), "{listed}");
    assert!(!listed.contains(&secret), "the secret is never shown again");

    // With a token, a non-loopback address is allowed (bind to all interfaces on an
    // ephemeral port; nothing is sent to it except from loopback).
    let (server, addr) = start(&data, "0.0.0.0:0");
    let port = addr.rsplit(':').next().expect("port").to_owned();
    let local = format!("127.0.0.1:{port}");
    let anonymous = http_get(&local, "/api/projects");
    assert!(anonymous.starts_with("HTTP/1.1 401"), "{anonymous}");
    assert!(anonymous.contains("unauthorized"), "{anonymous}");
    // Stopped cleanly, it withdraws its address, so auth may be turned off below.
    server.stop();

    // Revoking the last token leaves auth on; turning it off is a separate, explicit step.
    let id = listed.split_whitespace().next().expect("token id").to_owned();
    let revoked = spool().args(["token", "revoke", &id, "--data-dir"]).arg(&data).output().expect("revoke");
    assert!(revoked.status.success());
    let disabled = spool().args(["auth", "disable", "--data-dir"]).arg(&data).output().expect("disable");
    assert!(disabled.status.success(), "{}", String::from_utf8_lossy(&disabled.stderr));
    let refused = spool().args(["serve", "--addr", "0.0.0.0:0", "--data-dir"]).arg(&data).output().expect("serve");
    assert!(!refused.status.success(), "auth off: public bind refused again");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("spool token create"));
}

#[test]
fn health_says_how_commands_are_sandboxed_as_configured() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).expect("data dir");
    std::fs::write(data.join("config.toml"), "[sandbox]\nenv = [\"CARGO_HOME\"]\nnetwork = false\n").expect("config");
    let (server, addr) = start(&data, "127.0.0.1:0");
    let response = http_get(&addr, "/api/health");
    drop(server);
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b).expect("a body");
    let health: serde_json::Value = serde_json::from_str(body).expect("JSON");
    let sandbox = &health["sandbox"];
    assert_eq!(sandbox["network"], false, "{health}");
    let env: Vec<&str> = sandbox["env"].as_array().expect("env").iter().filter_map(|v| v.as_str()).collect();
    assert!(env.contains(&"PATH") && env.contains(&"CARGO_HOME") && !env.contains(&"OPENAI_API_KEY"), "{env:?}");
    // What this kernel offers, found the same way the server finds it.
    let here = spool_tools::probe_sandbox(&spool_tools::SandboxSettings { network: false, ..Default::default() });
    assert_eq!(sandbox["landlock"], here.landlock, "{health}");
    assert_eq!(sandbox["abi"], here.abi, "{health}");
    // Whether a call's processes end with it whatever they do (a PID namespace each).
    assert_eq!(sandbox["pidNamespace"], here.pid_namespace, "{health}");
    if here.landlock {
        assert!(here.abi >= 4, "this machine's kernel enforces network rules");
        assert_eq!(sandbox["fullyEnforced"], true, "{health}");
    }
}
