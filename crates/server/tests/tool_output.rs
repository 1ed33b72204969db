//! Live tool output through a real server: a `bash` command's output reaches the
//! session stream as `tool_execution_update` while the command still runs, a fresh
//! snapshot shows it, a reconnect with a cursor replays the updates exactly, a chatty
//! command stops streaming at the cap with a `truncated` marker, and a Stop mid-command
//! keeps what was printed in the stored tool result (also after a restart).
//!
//! Commands wait on a file the test creates (`gate`), never on a fixed sleep, so what
//! the test sees "while the command runs" is certain, not timing luck.

use crate::common;

use common::{Open, ReceivedFrame, SseStream, TestServer};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// A shell loop that waits until the test creates `gate` in the project.
const WAIT_FOR_GATE: &str = "while [ ! -f gate ]; do sleep 0.01; done";

async fn session_allowing_bash(server: &TestServer) -> String {
    let session = server.new_session().await;
    let (status, body) = server
        .patch(&format!("/api/sessions/{session}"), json!({"permissions": [{"tool": "bash", "action": "allow"}]}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    session
}

fn bash(command: &str) -> String {
    format!("tool: bash {}", json!({ "command": command }))
}

fn is_update(frame: &ReceivedFrame) -> bool {
    frame.event_type() == Some("tool_execution_update")
}

/// The output the updates among `frames` add up to, checking that each starts where
/// the previous one ended (offsets in UTF-16 units; the commands print ASCII).
fn joined(frames: &[ReceivedFrame]) -> String {
    let mut output = String::new();
    for frame in frames.iter().filter(|f| is_update(f)) {
        let event = &frame.json["event"];
        assert_eq!(event["offset"].as_u64(), Some(output.len() as u64), "a gap or overlap: {event}");
        output.push_str(event["delta"].as_str().expect("delta"));
    }
    output
}

/// Reads frames until the updates so far hold `text`.
async fn until_output(stream: &mut SseStream, seen: &mut Vec<ReceivedFrame>, text: &str) {
    while !joined(seen).contains(text) {
        seen.push(stream.next_frame().await.expect("the stream ended before the output"));
    }
}

fn exec<'a>(state: &'a Value, call: &str) -> &'a Value {
    &state["toolExecutions"][call]
}

async fn detail_state(server: &TestServer, session: &str) -> Value {
    let (status, detail) = server.get(&format!("/api/sessions/{session}")).await;
    assert_eq!(status, StatusCode::OK, "{detail}");
    detail["state"].clone()
}

/// The stored `toolResult` message of the session's one call.
async fn stored_result(server: &TestServer, session: &str) -> Value {
    let page = server.messages(session, "").await;
    let results: Vec<&Value> =
        page["messages"].as_array().expect("messages").iter().filter(|m| m["role"] == "toolResult").collect();
    assert_eq!(results.len(), 1, "{page}");
    results[0].clone()
}

#[tokio::test]
async fn the_first_line_arrives_while_the_command_runs_and_a_cursor_replays_the_updates_exactly() {
    let server = TestServer::start().await;
    let session = session_allowing_bash(&server).await;
    let mut live = server.events(&session, Open::fresh()).await;
    live.next_frame().await.expect("snapshot");
    let run = server.start_run(&session, &bash(&format!("echo first >&2; {WAIT_FOR_GATE}; echo second"))).await;

    let mut seen = live.frames_until(|f| f.event_type() == Some("tool_execution_start")).await;
    let start = seen.last().expect("the start").clone();
    let call = start.json["event"]["toolCallId"].as_str().expect("toolCallId").to_owned();
    until_output(&mut live, &mut seen, "first\n").await;
    // (It went to stderr: both pipes stream, in the order they are read.)
    // The gate is still closed, so the command is still running: the line came live.
    assert!(!seen.iter().any(|f| f.event_type() == Some("tool_execution_end")), "ended before the gate opened");
    let update = seen.iter().find(|f| is_update(f)).expect("an update");
    assert_eq!(update.json["event"]["toolCallId"], call.as_str());
    assert_eq!(update.json["event"]["toolName"], "bash");
    assert_eq!(update.json["event"]["truncated"], false);
    // A page opened now sees the output so far in its snapshot.
    let state = detail_state(&server, &session).await;
    assert_eq!(exec(&state, &call)["status"], "running", "{state}");
    assert_eq!(exec(&state, &call)["output"], "first\n", "{state}");

    std::fs::write(server.project_dir().join("gate"), "").expect("open the gate");
    seen.extend(live.frames_until(|f| f.event_type() == Some("agent_settled")).await);
    assert_eq!(server.wait_run(&run).await["status"], "completed");
    assert_eq!(joined(&seen), "first\nsecond\n");
    let end = seen.iter().find(|f| f.event_type() == Some("tool_execution_end")).expect("the end");
    assert_eq!(end.json["event"]["result"], "exit code 0\nfirst\nsecond\n");
    // Once the call has its result, snapshots stop carrying the live output.
    let state = detail_state(&server, &session).await;
    assert!(exec(&state, &call).get("output").is_none(), "{state}");

    // A client that lost its connection right after the start comes back with its
    // cursor and gets the very same updates, in order.
    let mut again = server.events(&session, Open::last_event_id(start.cursor())).await;
    let replayed = again.frames_until(|f| f.event_type() == Some("agent_settled")).await;
    let updates = |frames: &[ReceivedFrame]| -> Vec<Value> {
        frames.iter().filter(|f| is_update(f)).map(|f| f.json.clone()).collect()
    };
    assert_eq!(replayed.first().map(|f| f.kind.as_str()), Some("loop.event"), "a replay, not a snapshot");
    let live_after_start: Vec<ReceivedFrame> = seen.into_iter().skip_while(|f| f.seq <= start.seq).collect();
    assert!(!updates(&live_after_start).is_empty());
    assert_eq!(updates(&replayed), updates(&live_after_start));
}

#[tokio::test]
async fn a_chatty_command_streams_up_to_the_cap_then_one_truncated_update_and_nothing_more() {
    let server = TestServer::start().await;
    let session = session_allowing_bash(&server).await;
    let mut live = server.events(&session, Open::fresh()).await;
    live.next_frame().await.expect("snapshot");
    // 400,000 bytes, far past the 256 KiB cap, then a line after the cap.
    let command = "head -c 400000 /dev/zero | tr '\\0' x; echo; echo after-the-cap";
    let run = server.start_run(&session, &bash(command)).await;
    let frames = live.frames_until(|f| f.event_type() == Some("agent_settled")).await;
    assert_eq!(server.wait_run(&run).await["status"], "completed");

    let output = joined(&frames);
    assert_eq!(output.len(), spool_protocol::event::LIVE_OUTPUT_CAP, "exactly the cap streamed");
    assert!(output.bytes().all(|b| b == b'x'));
    let updates: Vec<&Value> = frames.iter().filter(|f| is_update(f)).map(|f| &f.json["event"]).collect();
    let truncated: Vec<usize> = (0..updates.len()).filter(|&i| updates[i]["truncated"] == true).collect();
    assert_eq!(truncated, [updates.len() - 1], "one truncated update, the last");
    // Coalesced: 4 KiB or more per update (the last may be less), not one per read.
    assert!(updates.len() <= spool_protocol::event::LIVE_OUTPUT_CAP / 4096 + 1, "{} updates", updates.len());
    // The result keeps its own limits (head and tail), so it still has the last line.
    let end = frames.iter().find(|f| f.event_type() == Some("tool_execution_end")).expect("the end");
    assert!(end.json["event"]["result"].as_str().expect("result").ends_with("\nafter-the-cap\n"));
}

#[tokio::test]
async fn stop_mid_command_keeps_the_printed_lines_in_the_stored_result_also_after_a_restart() {
    let server = TestServer::start().await;
    let session = session_allowing_bash(&server).await;
    let mut live = server.events(&session, Open::fresh()).await;
    live.next_frame().await.expect("snapshot");
    let run =
        server.start_run(&session, &bash(&format!("echo line one; echo line two; {WAIT_FOR_GATE}; echo never"))).await;
    let mut seen = Vec::new();
    until_output(&mut live, &mut seen, "line one\nline two\n").await;

    let (status, body) = server.post(&format!("/api/sessions/{session}/abort"), json!({})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(server.wait_run(&run).await["status"], "cancelled");
    seen.extend(live.frames_until(|f| f.event_type() == Some("agent_settled")).await);
    let expected = "the run was aborted before the tool finished; what it printed until then:\nline one\nline two\n";
    let end = seen.iter().find(|f| f.event_type() == Some("tool_execution_end")).expect("the end");
    assert_eq!(end.json["event"]["result"], expected);
    assert_eq!(end.json["event"]["isError"], true);

    let check = |result: Value, who: &str| {
        assert_eq!(result["content"][0]["text"], expected, "{who}: {result}");
        assert_eq!(result["isError"], true, "{who}");
    };
    check(stored_result(&server, &session).await, "stored");
    let call = end.json["event"]["toolCallId"].as_str().expect("id").to_owned();
    assert_eq!(exec(&detail_state(&server, &session).await, &call)["result"], expected);

    let server = server.restart().await;
    check(stored_result(&server, &session).await, "after a restart");
    assert_eq!(exec(&detail_state(&server, &session).await, &call)["result"], expected, "the card after a restart");
}

/// A secret of the server's environment that a command prints in two pieces, the gate
/// between them, is redacted in the live output as in the result: the stream holds
/// back an end that could start a secret until the next piece says whether it does.
#[tokio::test]
async fn a_secret_printed_in_two_pieces_is_redacted_in_the_live_output() {
    const SECRET: &str = "tok-live-output-secret-5e19b7";
    let test = "a_secret_printed_in_two_pieces_is_redacted_in_the_live_output";
    if !common::in_own_process(module_path!(), test, &[("SPOOL_TEST_LIVE_TOKEN", SECRET)]) {
        return;
    }
    let server = TestServer::start().await;
    // Commands do not get the server's environment; the value comes from a file.
    std::fs::write(server.project_dir().join("token.txt"), SECRET).expect("write");
    let session = session_allowing_bash(&server).await;
    let mut live = server.events(&session, Open::fresh()).await;
    live.next_frame().await.expect("snapshot");
    let command =
        format!("printf 'before\\n%s' \"$(head -c 10 token.txt)\"; {WAIT_FOR_GATE}; tail -c +11 token.txt; echo");
    let run = server.start_run(&session, &bash(&command)).await;
    let mut seen = Vec::new();
    until_output(&mut live, &mut seen, "before\n").await;
    std::fs::write(server.project_dir().join("gate"), "").expect("open the gate");
    seen.extend(live.frames_until(|f| f.event_type() == Some("agent_settled")).await);
    assert_eq!(server.wait_run(&run).await["status"], "completed");
    assert_eq!(joined(&seen), "before\n[redacted]\n");
    let state = detail_state(&server, &session).await;
    assert!(!state.to_string().contains(&SECRET[..10]), "{state}");
}
