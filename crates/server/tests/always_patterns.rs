//! "Always allow" on a `bash` card, through a real server (issue 36): the card offers
//! the parsed command's prefix patterns and the exact command, never all of bash; the
//! decision names the pattern the person chose; later commands are judged against the
//! stored rule part by part, so `git status *` lets `git status --short` run unasked
//! while `rm -rf x` still asks. Before this, "always" allowed every later command.

use crate::common;

use common::{TestServer, id_of};
use reqwest::StatusCode;
use serde_json::{Value, json};

fn bash(command: &str) -> String {
    format!("tool: bash {}", json!({ "command": command }))
}

/// Starts a run of `command` and waits until it settles or parks; its final status.
async fn run_status(server: &TestServer, session: &str, command: &str) -> String {
    let run = server.start_run(session, &bash(command)).await;
    let run = server.wait_run_until(&run, |r| r["status"] != "running").await;
    run["status"].as_str().unwrap_or_default().to_owned()
}

/// Parks a run at the approval for `command`; the run id and the pending approval.
async fn park(server: &TestServer, session: &str, command: &str) -> (String, Value) {
    server.park(session, &bash(command)).await
}

/// The pattern lists the card offers for "always".
fn offered(approval: &Value) -> Vec<Vec<String>> {
    approval["payload"]["alwaysOptions"]
        .as_array()
        .unwrap_or_else(|| panic!("no alwaysOptions in {approval}"))
        .iter()
        .map(|o| {
            o["patterns"].as_array().expect("patterns").iter().map(|p| p.as_str().expect("text").to_owned()).collect()
        })
        .collect()
}

async fn decide(server: &TestServer, session: &str, approval: &Value, body: Value) -> (StatusCode, Value) {
    server.post(&format!("/api/sessions/{session}/approvals/{}", id_of(approval)), body).await
}

async fn settle(server: &TestServer, run: &str) {
    let done = server.wait_run_until(run, |r| r["status"] != "running" && r["status"] != "interrupted").await;
    assert_eq!(done["status"], "completed", "{done}");
}

#[tokio::test]
async fn always_with_a_prefix_pattern_allows_that_prefix_and_nothing_else() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    let (run, approval) = park(&server, &session, "git status").await;
    let options = offered(&approval);
    assert_eq!(options, vec![vec!["git status".to_owned()], vec!["git status *".into()], vec!["git *".into()]]);

    let (status, body) =
        decide(&server, &session, &approval, json!({"decision": "always", "pattern": "git status *"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    settle(&server, &run).await;
    let (_, rules) = server.get(&format!("/api/sessions/{session}/permissions")).await;
    assert_eq!(rules["session"], json!([{"tool": "bash", "pattern": "git status *", "action": "allow"}]));

    assert_eq!(run_status(&server, &session, "git status --short").await, "completed");
    assert_eq!(run_status(&server, &session, "git status").await, "completed");
    assert_eq!(run_status(&server, &session, "rm -rf x").await, "interrupted");
}

#[tokio::test]
async fn a_plain_always_allows_only_the_exact_command() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    let (run, approval) = park(&server, &session, "git status").await;
    let (status, body) = decide(&server, &session, &approval, json!({"decision": "always"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    settle(&server, &run).await;

    assert_eq!(run_status(&server, &session, "git status").await, "completed");
    assert_eq!(run_status(&server, &session, "git status --short").await, "interrupted");
}

#[tokio::test]
async fn a_compound_command_offers_a_pattern_per_program_and_refuses_others() {
    let server = TestServer::start().await;
    let session = server.new_session().await;
    let (run, approval) = park(&server, &session, "git status | grep x").await;
    let options = offered(&approval);
    assert_eq!(options[0], vec!["git status | grep x".to_owned()], "{options:?}");
    assert!(options.contains(&vec!["git status *".into(), "grep *".into()]), "{options:?}");
    assert!(options.iter().flatten().all(|p| p != "*"), "{options:?}");

    // Nothing but what was offered: a 400 that names the choices, and nothing decided.
    for body in [
        json!({"decision": "always", "pattern": "*"}),
        json!({"decision": "always", "pattern": "rm *"}),
        json!({"decision": "always", "patterns": ["git status *"]}),
        json!({"decision": "always", "pattern": "grep *", "patterns": ["git status *"]}),
        json!({"decision": "once", "patterns": ["git status *", "grep *"]}),
    ] {
        let (status, answer) = decide(&server, &session, &approval, body.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body} → {answer}");
        assert_eq!(answer["error"]["code"], "pattern_not_offered", "{answer}");
        assert!(answer["error"]["message"].as_str().is_some_and(|m| m.contains("pattern")), "{answer}");
    }
    let (_, detail) = server.get(&format!("/api/sessions/{session}")).await;
    assert_eq!(detail["state"]["pendingApprovals"].as_array().map(Vec::len), Some(1), "{detail}");

    let chosen = json!({"decision": "always", "patterns": ["grep *", "git status *"]});
    let (status, body) = decide(&server, &session, &approval, chosen).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    settle(&server, &run).await;
    assert_eq!(run_status(&server, &session, "git status -s | grep -v y").await, "completed");
    assert_eq!(run_status(&server, &session, "git status; rm -rf x").await, "interrupted");
}

/// A server deny stays out of the choices: with `git push*` denied, `git *` is not
/// offered (it would read as "all of git"), the narrower ones are.
#[tokio::test]
async fn no_choice_covers_what_the_server_denies() {
    use spool_protocol::{PermissionAction, PermissionRule};
    let mut options = common::TestOptions::default();
    options.engine.rules.push(PermissionRule::new("bash", "git push*", PermissionAction::Deny));
    let server = TestServer::start_with(options).await;
    let session = server.new_session().await;
    let (_, approval) = park(&server, &session, "git status").await;
    assert_eq!(offered(&approval), vec![vec!["git status".to_owned()], vec!["git status *".into()]]);
}
