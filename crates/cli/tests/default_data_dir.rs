//! Where `spool` keeps its data when no `--data-dir` is given, as a newcomer meets it:
//! the README says to start the server in the repository, and a data directory inside
//! the repository (the old default, `./.spool`) made the repository and every directory
//! above it refused as a project (403 `data_dir`), from the web UI and from `spool chat`
//! alike. The default is now the platform's data directory (`$XDG_DATA_HOME/spool`,
//! else `~/.local/share/spool`); a `./.spool` that holds a store from an earlier version
//! is still used, with a warning saying how to move it, so no data is left behind.

use crate::common;

use common::{call, serve_logged, spool};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A home directory, an XDG data directory and a git repository, each of the test's own.
struct Machine {
    dir: tempfile::TempDir,
}

impl Machine {
    fn new() -> Machine {
        let dir = tempfile::tempdir().expect("temp dir");
        for sub in ["home", "xdg", "repo"] {
            std::fs::create_dir(dir.path().join(sub)).expect("mkdir");
        }
        git2::Repository::init(dir.path().join("repo")).expect("git init");
        Machine { dir }
    }

    fn path(&self, sub: &str) -> PathBuf {
        self.dir.path().join(sub)
    }

    /// `spool ARGS…` started in the repository, as a person in it types the command.
    fn spool_in_repo(&self, args: &[&str]) -> Command {
        let mut cmd = spool();
        cmd.args(args).current_dir(self.path("repo")).env("HOME", self.path("home")).env("XDG_DATA_HOME", self.path("xdg"));
        cmd
    }

    /// `spool serve` on its defaults (but a free port), in the repository; its log goes
    /// to the file `log`.
    fn serve_in_repo(&self, log: &Path) -> (common::Spool, String) {
        let mut cmd = self.spool_in_repo(&["serve", "--addr", "127.0.0.1:0"]);
        cmd.stderr(common::log_to(log));
        spool_test_support::process::serve(cmd)
    }
}

fn canonical(path: &Path) -> String {
    path.canonicalize().expect("canonicalize").to_str().expect("UTF-8").to_owned()
}

#[tokio::test]
async fn serve_on_defaults_in_a_repository_keeps_its_data_under_xdg_and_the_repository_is_a_project() {
    let machine = Machine::new();
    let log = machine.path("serve.log");
    let (_server, base) = machine.serve_in_repo(&log);

    // `spool chat` in the repository registers it and chats there.
    let mut chat = machine
        .spool_in_repo(&["chat", "--json", "--server", &base])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn spool chat");
    writeln!(chat.stdin.take().expect("stdin"), "stream: 3").expect("write the prompt");
    let mut text = String::new();
    for line in BufReader::new(chat.stdout.take().expect("stdout")).lines() {
        let event: Value = serde_json::from_str(&line.expect("read")).expect("one JSON object a line");
        if event["event"]["assistantMessageEvent"]["type"] == "text_delta" {
            text.push_str(event["event"]["assistantMessageEvent"]["delta"].as_str().expect("a delta"));
        }
    }
    let output = chat.wait_with_output().expect("chat's exit");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "spool chat in the repository: {stderr}");
    assert!(text.starts_with("w1 w2 w3"), "the answer streamed: {text:?} {stderr}");

    let client = reqwest::Client::builder().no_proxy().build().expect("client");
    let projects = call(client.get(format!("{base}/api/projects"))).await;
    let repo = canonical(&machine.path("repo"));
    assert!(projects.as_array().expect("a list").iter().any(|p| p["path"] == repo.as_str()), "{projects}");

    assert!(machine.path("xdg/spool/spool.db").is_file(), "the data is under $XDG_DATA_HOME/spool");
    assert!(!machine.path("repo/.spool").exists(), "and nothing was written in the repository");
}

#[test]
fn without_xdg_data_home_the_data_goes_under_home_local_share() {
    let machine = Machine::new();
    // Unset, and relative (which the XDG specification says to ignore): both mean the
    // default under the home directory.
    for xdg in [None, Some("relative/data")] {
        let mut cmd = machine.spool_in_repo(&["token", "list"]);
        match xdg {
            None => cmd.env_remove("XDG_DATA_HOME"),
            Some(value) => cmd.env("XDG_DATA_HOME", value),
        };
        let output = cmd.output().expect("spool token list");
        assert!(output.status.success(), "{xdg:?}: {}", String::from_utf8_lossy(&output.stderr));
        assert!(machine.path("home/.local/share/spool/spool.db").is_file(), "{xdg:?}");
        assert!(!machine.path("repo/relative").exists() && !machine.path("repo/.spool").exists());
    }
}

#[tokio::test]
async fn an_existing_dot_spool_with_a_store_is_still_used_and_the_log_says_how_to_move_it() {
    let machine = Machine::new();
    let client = reqwest::Client::builder().no_proxy().build().expect("client");
    // What an earlier version left: a store in ./.spool, holding a project.
    let other = machine.path("other");
    std::fs::create_dir(&other).expect("mkdir");
    let old = machine.path("repo/.spool");
    let (server, base) = serve_logged(
        &["--addr", "127.0.0.1:0", "--data-dir", old.to_str().expect("UTF-8")],
        &machine.path("old.log"),
    );
    call(client.post(format!("{base}/api/projects")).json(&json!({"path": other}))).await;
    server.stop();

    let log = machine.path("serve.log");
    let (_server, base) = machine.serve_in_repo(&log);
    let projects = call(client.get(format!("{base}/api/projects"))).await;
    let other = canonical(&other);
    assert!(
        projects.as_array().expect("a list").iter().any(|p| p["path"] == other.as_str()),
        "the earlier store is the one in use: {projects}"
    );
    assert!(!machine.path("xdg/spool/spool.db").exists(), "no second, empty store beside it");
    let logged = std::fs::read_to_string(&log).expect("the server's log");
    let old = canonical(&old);
    let new = machine.path("xdg/spool");
    assert!(logged.contains(&old) && logged.contains(&format!("mv {old} {}", new.display())), "{logged}");

    // What the warning is about: the repository still cannot be a project.
    let res = client.post(format!("{base}/api/projects")).json(&json!({"path": machine.path("repo")})).send().await;
    let res = res.expect("request");
    assert_eq!(res.status(), 403);
    let body: Value = res.json().await.expect("json");
    assert_eq!(body["error"]["code"], "data_dir", "{body}");
}
