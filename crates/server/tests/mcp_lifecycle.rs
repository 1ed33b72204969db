//! How a configured MCP server's connections live and die, with real processes: a
//! server that fails at every start is started again later and later, then given up
//! (no more starts, however many turns ask), with the reason in its status; a
//! session's server that goes unused is closed after the idle period and started again
//! when the session next asks. The timings are shortened through [`Lifecycle`]; the
//! rules they follow (1 s doubling to 60 s, 10 minutes idle) have unit tests in
//! spool-mcp.

use crate::mcp_support::{config, everything, everything_entry};

use serde_json::json;
use spool_engine::{SourceState, ToolScope, ToolSource};
use spool_mcp::{Lifecycle, McpSource};
use std::path::Path;
use std::time::Duration;

fn source(entry: serde_json::Value, lifecycle: Lifecycle) -> McpSource {
    McpSource::new(config(entry), Default::default(), None).with_lifecycle(lifecycle)
}

fn scope(root: &Path) -> ToolScope {
    ToolScope { session_id: spool_protocol::SessionId::new(), root: root.canonicalize().expect("root") }
}

/// Sleeps until the retry time the source's status shows (and a little more: it is
/// shown in whole milliseconds).
pub(crate) async fn wait_for_retry(source: &McpSource) {
    let status = source.status().expect("a status");
    let SourceState::Failed { retry_at_ms: Some(at), .. } = status.state else { panic!("waiting: {status:?}") };
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_millis();
    let ahead = u64::try_from(i128::from(at) - i128::try_from(now).expect("ms")).unwrap_or(0);
    tokio::time::sleep(Duration::from_millis(ahead + 5)).await;
}

#[tokio::test]
async fn a_server_that_keeps_failing_is_started_later_and_later_then_given_up() {
    let project = tempfile::tempdir().expect("project");
    // Each start leaves a line in the project (the sandbox lets it write there).
    let entry = json!({"name": "broken", "command": "/bin/sh", "args": ["-c", "echo start >> starts; exit 3"]});
    let lifecycle = Lifecycle {
        first_backoff: Duration::from_millis(300),
        max_backoff: Duration::from_millis(600),
        ..Lifecycle::default()
    };
    let source = source(entry, lifecycle);
    let scope = scope(project.path());
    let starts = || std::fs::read_to_string(project.path().join("starts")).unwrap_or_default().lines().count();

    let status = source.status().expect("a status");
    assert_eq!(
        (status.transport.as_str(), status.target.as_str()),
        ("stdio", r#"/bin/sh -c "echo start >> starts; exit 3""#)
    );
    assert!(source.tools(&scope).await.is_empty());
    assert_eq!(starts(), 1);
    let status = source.status().expect("a status");
    let SourceState::Failed { reason, retry_at_ms: Some(_) } = &status.state else { panic!("{status:?}") };
    assert!(reason.contains("exit status: 3"), "{reason}");
    // After one failure the next turn waits out the short backoff and starts it again;
    // after two, a turn within the wait starts nothing and gets no tools at once.
    assert!(source.tools(&scope).await.is_empty());
    assert_eq!(starts(), 2);
    assert!(source.tools(&scope).await.is_empty());
    assert_eq!(starts(), 2, "no start before the wait is over");

    // Each turn after the wait starts it again.
    for expected in 3..=5 {
        wait_for_retry(&source).await;
        assert!(source.tools(&scope).await.is_empty());
        assert_eq!(starts(), expected);
    }
    let status = source.status().expect("a status");
    let SourceState::Failed { reason, retry_at_ms: None } = &status.state else { panic!("given up: {status:?}") };
    assert!(reason.contains("exit status: 3") && reason.contains("given up after 5 failures in a row"), "{reason}");
    assert_eq!(status.connections, 0);

    // Given up: turns are answered at once, and nothing is started again, however long
    // after the last wait (the longest, 600 ms) they come.
    tokio::time::sleep(Duration::from_millis(700)).await;
    for _ in 0..3 {
        assert!(source.tools(&scope).await.is_empty());
    }
    assert_eq!(starts(), 5);

    // "Try again" (the person fixed something): the failures are forgotten, the next
    // turn starts it, and a new streak begins at one; a server not given up is left be.
    assert!(source.retry(), "it was given up");
    assert_eq!(source.status().expect("a status").state, SourceState::Idle);
    assert!(source.tools(&scope).await.is_empty());
    assert_eq!(starts(), 6);
    let status = source.status().expect("a status");
    let SourceState::Failed { reason, retry_at_ms: Some(_) } = &status.state else { panic!("{status:?}") };
    assert!(!reason.contains("given up"), "{reason}");
    assert!(!source.retry(), "not given up: nothing to try again");
}

#[tokio::test]
async fn an_idle_session_server_is_closed_and_started_again_when_asked() {
    let Some(index) = everything() else { return };
    let project = tempfile::tempdir().expect("project");
    let entry = everything_entry(&index);
    let lifecycle = Lifecycle { idle_close: Duration::from_millis(500), ..Lifecycle::default() };
    let source = source(entry, lifecycle);
    let scope = scope(project.path());

    let tools = source.tools(&scope).await;
    assert!(tools.iter().any(|t| t.spec().name == "everything_echo"), "listed: {:?}", source.status());
    let pids = source.server_pids();
    assert_eq!(pids.len(), 1);
    let status = source.status().expect("a status");
    assert_eq!((status.state, status.connections), (SourceState::Ready, 1));
    assert!(status.tools.iter().any(|t| t.name == "everything_echo"));

    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while !source.server_pids().is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "never closed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let status = source.status().expect("a status");
    assert_eq!((status.state, status.connections), (SourceState::Idle, 0), "closed, not failed");
    assert!(!status.tools.is_empty(), "the last listing is still shown");
    // The process is gone, not just forgotten.
    let gone = tokio::time::Instant::now() + Duration::from_secs(5);
    while Path::new(&format!("/proc/{}", pids[0])).exists() {
        assert!(tokio::time::Instant::now() < gone, "server {} still running", pids[0]);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    assert!(!source.tools(&scope).await.is_empty(), "started again");
    let again = source.server_pids();
    assert_eq!(again.len(), 1);
    assert_ne!(again, pids);
}
