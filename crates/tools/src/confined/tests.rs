//! Tests of [`spawn_confined`] with real processes, as `bash`'s sandbox is tested: a
//! project and a data dir beside it ([`sandboxed`]), the Landlock ones skipped where the
//! kernel has none.

use super::*;
use crate::bash::tests::{HANG, landlock, marker, namespaced, none_left, sandboxed, started};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

fn sh(script: &str) -> ConfinedCommand {
    ConfinedCommand { program: "sh".into(), args: vec!["-c".into(), script.into()], ..ConfinedCommand::default() }
}

async fn spawn(command: &ConfinedCommand, root: &Path, data: &Path) -> ConfinedChild {
    spawn_confined(command, &SandboxSettings::default(), root, Some(data)).await.expect("spawned")
}

/// Everything the child writes to stdout and stderr until it exits, and how it ended.
async fn run(command: &ConfinedCommand, root: &Path, data: &Path) -> (String, ExitStatus) {
    let mut child = spawn(command, root, data).await;
    drop(child.stdin);
    let (mut out, mut err) = (String::new(), String::new());
    let read = async {
        let (o, e) = tokio::join!(child.stdout.read_to_string(&mut out), child.stderr.read_to_string(&mut err));
        o.and(e).expect("read the pipes");
        child.guard.wait().await.expect("waited")
    };
    let status = tokio::time::timeout(HANG, read).await.expect("the child ended");
    (out + &err, status)
}

#[tokio::test]
async fn echoes_stdin_to_stdout_until_the_guard_drops() {
    let (_dir, root, data, _) = sandboxed();
    let command = ConfinedCommand { program: "cat".into(), ..ConfinedCommand::default() };
    let ConfinedChild { mut stdin, stdout, guard, .. } = spawn(&command, &root, &data).await;
    let mut lines = BufReader::new(stdout).lines();
    for message in [r#"{"jsonrpc":"2.0","id":1,"method":"initialize"}"#, "second"] {
        stdin.write_all(format!("{message}\n").as_bytes()).await.expect("write");
        let echoed = tokio::time::timeout(HANG, lines.next_line()).await.expect("echoed in time").expect("read");
        assert_eq!(echoed.as_deref(), Some(message));
    }
    drop(guard);
    let end = tokio::time::timeout(HANG, lines.next_line()).await.expect("stdout closed in time");
    assert!(matches!(end, Ok(None) | Err(_)), "cat outlived its guard: {end:?}");
}

#[tokio::test]
async fn the_exit_status_comes_back() {
    let (_dir, root, data, _) = sandboxed();
    let (_, status) = run(&sh("exit 3"), &root, &data).await;
    assert_eq!(status.code(), Some(3));
}

/// Only the allow-list reaches the child, its own variables are set on top, and
/// `TMPDIR` stays its own.
#[tokio::test]
async fn sees_only_the_allowed_environment_and_its_own() {
    let (_dir, root, data, _) = sandboxed();
    let command = ConfinedCommand {
        program: "env".into(),
        env: vec![("MCP_TEST_TOKEN".into(), "given".into()), ("TMPDIR".into(), "/elsewhere".into())],
        ..ConfinedCommand::default()
    };
    let (out, status) = run(&command, &root, &data).await;
    assert!(status.success(), "{out}");
    assert!(out.lines().any(|l| l == "MCP_TEST_TOKEN=given"), "{out}");
    for line in out.lines() {
        let (name, value) = line.split_once('=').unwrap_or((line, ""));
        let allowed = crate::BASE_ENV.contains(&name) || name.starts_with("LC_") || name == "MCP_TEST_TOKEN";
        assert!(allowed || name == "TMPDIR", "{name} leaked into the child: {out}");
        if name == "TMPDIR" {
            assert!(value.contains("spool-bash-"), "TMPDIR was overridden: {value}");
        }
    }
}

#[tokio::test]
async fn holds_no_capabilities() {
    let (_dir, root, data, _) = sandboxed();
    let (out, _) = run(&sh("grep ^Cap /proc/self/status"), &root, &data).await;
    for name in ["CapInh:", "CapPrm:", "CapEff:", "CapAmb:"] {
        let line = out.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("no {name} in {out}"));
        assert!(line.ends_with("0000000000000000"), "{line}");
    }
}

#[tokio::test]
async fn cannot_read_the_data_dir() {
    if !landlock() {
        return;
    }
    let (_dir, root, data, outside) = sandboxed();
    let script = format!("cat {}/readable.txt; cat {}/config.toml", outside.display(), data.display());
    let (out, _) = run(&sh(&script), &root, &data).await;
    assert!(out.contains("readable from anywhere"), "{out}");
    assert!(!out.contains("sk-in-the-data-dir"), "the data dir was read: {out}");
    assert!(out.contains("Permission denied"), "{out}");
}

/// Writes land in the project and the granted directory, nowhere else.
#[tokio::test]
async fn cannot_write_outside_the_project_and_its_grants() {
    if !landlock() {
        return;
    }
    let (dir, root, data, outside) = sandboxed();
    let granted = dir.path().canonicalize().expect("canonical").join("granted");
    std::fs::create_dir(&granted).expect("mkdir");
    let script = format!(
        "echo in > inside.txt; echo g > {0}/g.txt; echo out > {1}/escaped.txt",
        granted.display(),
        outside.display()
    );
    let command = ConfinedCommand { rw_paths: vec![granted.clone()], ..sh(&script) };
    let (out, _) = run(&command, &root, &data).await;
    assert_eq!(std::fs::read_to_string(root.join("inside.txt")).expect("written in the project"), "in\n");
    assert_eq!(std::fs::read_to_string(granted.join("g.txt")).expect("written where granted"), "g\n");
    assert!(!outside.join("escaped.txt").exists(), "a write outside the project landed: {out}");
    assert!(out.contains("Permission denied"), "{out}");
}

/// A write grant on the data dir, inside it, above it or on a secret is refused before
/// anything starts, as is one that does not exist.
#[tokio::test]
async fn write_grants_on_the_data_dir_or_a_secret_are_refused() {
    let (dir, root, data, outside) = sandboxed();
    let secret = outside.join("key.pem");
    std::fs::write(&secret, "secret").expect("write");
    let settings = SandboxSettings { secret_paths: vec![secret.clone()], ..SandboxSettings::default() };
    let base = dir.path().canonicalize().expect("canonical");
    for grant in [data.clone(), data.join("."), base, secret, outside.clone(), outside.join("missing")] {
        let command = ConfinedCommand { rw_paths: vec![grant.clone()], ..sh("true") };
        let refused = spawn_confined(&command, &settings, &root, Some(&data)).await;
        let Err(err) = refused else { panic!("a write grant on {} was accepted", grant.display()) };
        assert!(err.to_string().contains("grant writes to"), "{grant:?}: {err}");
    }
}

#[tokio::test]
async fn network_off_blocks_tcp_and_on_allows_it() {
    if !landlock() {
        return;
    }
    let (_dir, root, data, _) = sandboxed();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let connect = |network| ConfinedCommand {
        program: "bash".into(),
        args: vec!["-c".into(), format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected")],
        network,
        ..ConfinedCommand::default()
    };
    let (out, status) = run(&connect(true), &root, &data).await;
    assert!(status.success() && out.contains("connected"), "{out}");
    let (out, status) = run(&connect(false), &root, &data).await;
    assert!(!status.success() && !out.contains("connected"), "{out}");
    assert!(out.contains("Permission denied"), "{out}");
}

/// What the child started, in its group or in a session of its own, dies with the
/// guard. Without a PID namespace the `setsid` one is known to survive (and is killed
/// here, not asserted), as for `bash`.
#[tokio::test]
async fn its_children_die_when_the_guard_drops() {
    let (_dir, root, data, _) = sandboxed();
    let (kept, escaped) = (marker(400), marker(401));
    let script = format!("sleep {kept} & setsid sleep {escaped} & cat");
    let child = spawn(&sh(&script), &root, &data).await;
    started(&kept).await;
    started(&escaped).await;
    drop(child);
    assert!(none_left(&kept).await, "`sleep {kept}` outlived the guard");
    let escaped_ended = none_left(&escaped).await;
    if namespaced() {
        assert!(escaped_ended, "`setsid sleep {escaped}` outlived the guard");
    }
}
