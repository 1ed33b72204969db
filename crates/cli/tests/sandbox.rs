//! What an approved `bash` command can reach, through `spool serve` as an operator runs
//! it (issue 35, found from outside): the store's and the bus's ports and the
//! PostgreSQL socket are closed to commands while other local ports stay open; with
//! `network = false` UDP and UNIX sockets are closed too; the TLS key and a config file
//! kept outside the data directory cannot be read, and a config `[env]` secret a
//! command prints comes back redacted.

use crate::common;

use common::{TestDb, WAIT, call, redis_url, serve, start_with, wait_for};
use serde_json::{Value, json};
use std::path::Path;

/// The PostgreSQL socket of the test machine's server (Debian's place for it).
const PG_SOCKET: &str = "/var/run/postgresql/.s.PGSQL.5432";

/// A config file that lets `bash` run without asking, with `extra` after the rule.
fn config(dir: &Path, extra: &str) -> std::path::PathBuf {
    let path = dir.join("spool.toml");
    let text =
        format!("# marker: the config file was read\n{extra}\n[[permission]]\ntool = \"bash\"\naction = \"allow\"\n");
    std::fs::write(&path, text).expect("write the config");
    path
}

/// Registers the project at `path`; returns its id.
async fn project(client: &reqwest::Client, base: &str, path: &Path) -> Value {
    call(client.post(format!("{base}/api/projects")).json(&json!({"path": path}))).await["id"].clone()
}

/// Runs `command` through the scripted model's `bash` call in a new session of the
/// project `project`, and returns the tool result's text.
async fn run_bash(client: &reqwest::Client, base: &str, project: &Value, command: &str) -> String {
    let session = call(client.post(format!("{base}/api/sessions")).json(&json!({"projectId": project}))).await;
    let session = session["id"].as_str().expect("session id").to_owned();
    let prompt = format!("tool: bash {}", json!({ "command": command }));
    let accepted =
        call(client.post(format!("{base}/api/sessions/{session}/prompt")).json(&json!({"text": prompt}))).await;
    let run = accepted["runId"].as_str().expect("run id").to_owned();
    let settled = wait_for(client, &format!("{base}/api/runs/{run}"), WAIT, |r| r["status"] != "running").await;
    assert_eq!(settled["status"], "completed", "{settled}");
    let page = call(client.get(format!("{base}/api/sessions/{session}/messages"))).await;
    let messages = page["messages"].as_array().expect("messages").clone();
    let result: &Value = messages.iter().find(|m| m["role"] == "toolResult").expect("a tool result");
    result["content"][0]["text"].as_str().expect("text").to_owned()
}

/// Whether this kernel's Landlock handles TCP (ABI 4+), as the server's probe says.
fn landlock_net() -> bool {
    let status = spool_tools::probe_sandbox(&spool_tools::SandboxSettings::default());
    let on = status.landlock && status.abi >= 4;
    if !on {
        eprintln!("skipped: this kernel's Landlock does not handle TCP (ABI {})", status.abi);
    }
    on
}

/// Issue 35, point 3: with the default sandbox (network on) a command connected to
/// PostgreSQL and Redis and minted tokens. Now the store's and the bus's ports are
/// closed to commands (IPv4 and IPv6) and so is the PostgreSQL socket, while another
/// local port still answers.
#[cfg_attr(
    not(all(spool_postgres, spool_redis)),
    ignore = "needs PostgreSQL and Redis: set SPOOL_TEST_DATABASE_URL and SPOOL_TEST_REDIS_URL"
)]
#[tokio::test]
async fn a_command_cannot_reach_the_store_or_the_bus() {
    if !landlock_net() {
        return;
    }
    let db = TestDb::create().await;
    let redis = redis_url();
    let dir = tempfile::tempdir().expect("tempdir");
    let project = dir.path().join("project");
    std::fs::create_dir(&project).expect("project dir");
    let config = config(dir.path(), "");
    let id = format!("sandbox-{}", std::process::id());
    let args = ["--redis-url", &redis, "--node-id", &id, "--config", config.to_str().expect("UTF-8")];
    let (_server, base) = start_with(&db.url, &dir.path().join("data"), &args);
    let client = reqwest::Client::builder().no_proxy().build().expect("client");
    let project = self::project(&client, &base, &project).await;

    let other = std::net::TcpListener::bind("127.0.0.1:0").expect("bind another port");
    let other = other.local_addr().expect("addr").port();
    let command = format!(
        "for target in 127.0.0.1/5432 127.0.0.1/6379 ::1/6379 127.0.0.1/{other}; do \
           if (exec 3<>/dev/tcp/$target) 2>/dev/null; then echo \"$target open\"; else echo \"$target refused\"; fi; \
         done; \
         python3 -c 'import socket; s = socket.socket(socket.AF_UNIX); s.connect(\"{PG_SOCKET}\"); print(\"unix open\")' \
           2>/dev/null || echo 'unix refused'"
    );
    let out = run_bash(&client, &base, &project, &command).await;
    for closed in ["127.0.0.1/5432", "127.0.0.1/6379", "::1/6379"] {
        assert!(out.contains(&format!("{closed} refused")), "a command reached {closed}: {out}");
    }
    assert!(out.contains(&format!("127.0.0.1/{other} open")), "another local port must stay open: {out}");
    if Path::new(PG_SOCKET).exists() {
        assert!(out.contains("unix refused"), "a command reached the PostgreSQL socket: {out}");
    } else {
        eprintln!("skipped the socket half: no {PG_SOCKET} on this machine");
    }
}

/// Issue 35, point 9: with `network = false` TCP was closed but a UDP datagram still
/// went out and the PostgreSQL socket still connected.
#[tokio::test]
async fn with_network_off_udp_and_unix_sockets_are_closed_too() {
    let dir = tempfile::tempdir().expect("tempdir");
    let project = dir.path().join("project");
    std::fs::create_dir(&project).expect("project dir");
    let config = config(dir.path(), "[sandbox]\nnetwork = false");
    let listener = std::os::unix::net::UnixListener::bind(dir.path().join("service.sock")).expect("a unix socket");
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").expect("a UDP socket");
    let udp_port = udp.local_addr().expect("addr").port();
    let data = dir.path().join("data");
    let args = ["--addr", "127.0.0.1:0", "--data-dir", data.to_str().expect("UTF-8")];
    let (_server, base) = serve(&[&args[..], &["--config", config.to_str().expect("UTF-8")]].concat());
    let client = reqwest::Client::builder().no_proxy().build().expect("client");
    let project = self::project(&client, &base, &project).await;

    let socket = listener.local_addr().expect("addr");
    let socket = socket.as_pathname().expect("a path").display().to_string();
    let command = format!(
        "python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b\"out\", (\"127.0.0.1\", {udp_port})); print(\"udp sent\")' \
           2>/dev/null || echo 'udp refused'; \
         python3 -c 'import socket; s = socket.socket(socket.AF_UNIX); s.connect(\"{socket}\"); print(\"unix open\")' \
           2>/dev/null || echo 'unix refused'"
    );
    let out = run_bash(&client, &base, &project, &command).await;
    assert!(out.contains("udp refused"), "a UDP datagram went out: {out}");
    assert!(out.contains("unix refused"), "a UNIX socket connected: {out}");
    udp.set_nonblocking(true).expect("nonblocking");
    assert!(udp.recv(&mut [0u8; 16]).is_err(), "the datagram arrived");
}

/// Issue 35, point 4: a command read the TLS private key and a `--config` file kept
/// outside the data directory (with `[env]` provider keys), and, under a root server,
/// `/etc/shadow`. Each is refused now, and an `[env]` secret a command prints anyway
/// comes back redacted.
#[tokio::test]
async fn a_command_cannot_read_the_servers_secret_files() {
    const SECRET: &str = "sk-config-env-5f4e3d2c1b";
    let dir = tempfile::tempdir().expect("tempdir");
    let (outside, project) = (dir.path().join("outside"), dir.path().join("project"));
    std::fs::create_dir(&project).expect("project dir");
    std::fs::create_dir(&outside).expect("outside dir");
    let made = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).expect("make a certificate");
    let (cert, key) = (outside.join("cert.pem"), outside.join("key.pem"));
    std::fs::write(&cert, made.cert.pem()).expect("write the certificate");
    std::fs::write(&key, made.signing_key.serialize_pem()).expect("write the key");
    std::fs::write(outside.join("notes.txt"), "readable beside them\n").expect("write");
    let config = config(&outside, &format!("[env]\nSPOOL_TEST_PROVIDER_API_KEY = \"{SECRET}\""));
    let data = dir.path().join("data");
    let (_server, base) = serve(&[
        "--addr",
        "127.0.0.1:0",
        "--data-dir",
        data.to_str().expect("UTF-8"),
        "--config",
        config.to_str().expect("UTF-8"),
        "--tls-cert",
        cert.to_str().expect("UTF-8"),
        "--tls-key",
        key.to_str().expect("UTF-8"),
    ]);
    let client = reqwest::Client::builder()
        .no_proxy()
        .add_root_certificate(reqwest::Certificate::from_pem(made.cert.pem().as_bytes()).expect("PEM"))
        .build()
        .expect("client");
    let project = self::project(&client, &base, &project).await;

    let command = format!(
        "cat {key}; cat {config}; cat {outside}/notes.txt; echo \"printed: {SECRET}\"",
        key = key.display(),
        config = config.display(),
        outside = outside.display()
    );
    let out = run_bash(&client, &base, &project, &command).await;
    assert!(!out.contains("PRIVATE KEY"), "the TLS key was read: {out}");
    assert!(!out.contains("marker: the config file was read"), "the config file was read: {out}");
    assert!(out.contains("readable beside them"), "the files beside them stay readable: {out}");
    assert!(out.contains("printed: [redacted]") && !out.contains(SECRET), "an [env] secret came back: {out}");

    // As root a command owns /etc/shadow (its mode gives the owner read), capabilities
    // or not: only the sandbox keeps it closed.
    let root = std::fs::metadata("/proc/self").is_ok_and(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0);
    if root && Path::new("/etc/shadow").exists() {
        let out = run_bash(&client, &base, &project, "cat /etc/shadow; head -n 1 /etc/passwd").await;
        assert!(out.contains("/etc/shadow: Permission denied"), "a root server's command read /etc/shadow: {out}");
        assert!(out.contains("root:x:0:0"), "/etc/passwd stays readable: {out}");
    }
}

/// Found while closing the store and the bus: with auth off (the default) a command
/// could call the server that runs it, list the sessions and allow every tool in its
/// own session, turning one approved command into any number. The server's own port is
/// closed to commands too.
#[tokio::test]
async fn a_command_cannot_call_the_server_that_runs_it() {
    if !landlock_net() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let project = dir.path().join("project");
    std::fs::create_dir(&project).expect("project dir");
    let config = config(dir.path(), "");
    // A fixed port, as an operator gives one: a free one, let go just before the start.
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    let (addr, data) = (format!("127.0.0.1:{port}"), dir.path().join("data"));
    let (_server, base) = serve(&[
        "--addr",
        &addr,
        "--data-dir",
        data.to_str().expect("UTF-8"),
        "--config",
        config.to_str().expect("UTF-8"),
    ]);
    let client = reqwest::Client::builder().no_proxy().build().expect("client");
    let project = self::project(&client, &base, &project).await;
    let command =
        format!("(exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo 'server open' || echo 'server refused'");
    let out = run_bash(&client, &base, &project, &command).await;
    assert!(out.contains("server refused"), "a command reached the server's own port: {out}");
}
