//! `spool chat` as a person at a terminal uses it: the real binary in a
//! pseudo-terminal (rexpect), against a real `spool serve` with the scripted model.
//! Typed lines are prompts, approvals are answered at the prompt, Ctrl-C goes through
//! the terminal's line discipline as SIGINT. `--json` is read line by line as a
//! script would. The screen tests render what the chat wrote through a terminal
//! emulator (`vt100`) with the terminal's echo on, as a person's terminal has it, and
//! assert what that screen shows.

use crate::common;

use common::{WAIT, serve};
use rexpect::session::PtySession;
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Instant;

/// A server with its data and project directories; the project is a workspace root, so
/// a token's user may register it.
struct Setup {
    server: Option<common::Spool>,
    base: String,
    dir: tempfile::TempDir,
    args: Vec<String>,
}

impl Setup {
    fn start(delay_ms: u64) -> Setup {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir_all(dir.path().join("project")).expect("project dir");
        let data = dir.path().join("data").to_str().expect("UTF-8").to_owned();
        let root = dir.path().to_str().expect("UTF-8").to_owned();
        let args = ["--data-dir", &data, "--scripted-delay-ms", &delay_ms.to_string(), "--workspace-root", &root]
            .map(str::to_owned)
            .to_vec();
        let mut setup = Setup { server: None, base: String::new(), dir, args };
        setup.serve("127.0.0.1:0");
        setup
    }

    fn serve(&mut self, addr: &str) {
        let mut args = vec!["--addr", addr];
        args.extend(self.args.iter().map(String::as_str));
        let (server, base) = serve(&args);
        self.server = Some(server);
        self.base = base;
    }

    /// Stops the server and starts it again on the same address and data.
    fn restart(&mut self) {
        self.server.take().expect("a running server").stop();
        let addr = self.base.trim_start_matches("http://").to_owned();
        self.serve(&addr);
    }

    fn project(&self) -> std::path::PathBuf {
        self.dir.path().join("project")
    }

    /// `spool chat` on a new session in the project, with `extra` arguments.
    fn chat(&self, extra: &[&str]) -> Command {
        let mut cmd = self.chat_on(extra);
        cmd.arg("--project").arg(self.project());
        cmd
    }

    fn chat_on(&self, extra: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_spool"));
        cmd.args(["chat", "--server", &self.base])
            .args(extra)
            .env_remove("SPOOL_SERVER")
            .env_remove("SPOOL_TOKEN")
            .env("RUST_LOG", "warn");
        cmd
    }

    /// `spool chat` in a pseudo-terminal, once it is ready for a prompt.
    fn terminal(&self) -> PtySession {
        let timeout = u64::try_from(WAIT.as_millis()).expect("a small timeout");
        let mut chat = rexpect::session::spawn_command(self.chat(&[]), Some(timeout)).expect("spawn spool chat");
        chat.exp_string("type a prompt").expect("the greeting");
        chat
    }

    /// `spool chat` on a terminal of `COLUMNS`×`ROWS` with echo on, as a person's
    /// terminal is (rexpect's is silent), read through a terminal emulator.
    fn screen(&self) -> Screen {
        let chat = self.chat(&[]);
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(format!("stty cols {COLUMNS} rows {ROWS} echo && exec \"$0\" \"$@\""))
            .arg(chat.get_program())
            .args(chat.get_args());
        for (key, value) in chat.get_envs() {
            match value {
                Some(value) => cmd.env(key, value),
                None => cmd.env_remove(key),
            };
        }
        let timeout = u64::try_from(WAIT.as_millis()).expect("a small timeout");
        let chat = rexpect::session::spawn_command(cmd, Some(timeout)).expect("spawn spool chat");
        let size = |n: u16| std::num::NonZeroU16::new(n).expect("a terminal has a size");
        let mut screen = Screen { chat, terminal: vt100::Parser::new(size(ROWS), size(COLUMNS), 0) };
        screen.wait_for("greeting", |s| s.contents().contains("type a prompt"));
        screen
    }
}

/// A server whose scripted model waits `delay_ms` between words, and `spool chat` on it
/// in a pseudo-terminal, ready for a prompt. The server lives as long as the `Setup`.
fn at_a_terminal(delay_ms: u64) -> (Setup, PtySession) {
    let setup = Setup::start(delay_ms);
    let chat = setup.terminal();
    (setup, chat)
}

/// Types a prompt whose tool call needs approval, and waits for the approval card,
/// which opens with `card`.
fn ask(chat: &mut PtySession, prompt: &str, card: &str) {
    chat.send_line(prompt).expect("type");
    chat.exp_string(card).unwrap_or_else(|e| panic!("no approval card {card:?}: {e}"));
}

const COLUMNS: u16 = 100;
const ROWS: u16 = 40;

/// A terminal showing `spool chat`: every byte it wrote, rendered.
struct Screen {
    chat: PtySession,
    terminal: vt100::Parser,
}

impl Screen {
    /// Waits until the screen shows what `done` looks for, putting what the chat writes
    /// on the screen as it comes.
    fn wait_for(&mut self, what: &str, done: impl Fn(&vt100::Screen) -> bool) {
        let deadline = Instant::now() + WAIT;
        while !done(self.terminal.screen()) {
            assert!(Instant::now() < deadline, "no {what} on the screen:\n{}", self.terminal.screen().contents());
            // Everything written so far, once there is something (rexpect hands out
            // each byte as one `char`).
            let Ok((before, written)) = self.chat.exp_regex("(?s).+") else { continue };
            let bytes: Vec<u8> =
                before.chars().chain(written.chars()).map(|c| u8::try_from(u32::from(c)).expect("a byte")).collect();
            self.terminal.process(&bytes);
        }
    }

    fn contents(&self) -> String {
        self.terminal.screen().contents()
    }

    /// The row the cursor is on: the input line.
    fn input_row(&self) -> String {
        let screen = self.terminal.screen();
        let row = usize::from(screen.cursor_position().0);
        screen.rows(0, COLUMNS).nth(row).expect("the cursor is on the screen").trim_end().to_owned()
    }

    fn send(&mut self, text: &str) {
        self.chat.send(text).expect("type");
        self.chat.flush().expect("type");
    }
}

/// The highest `wN` of a `stream: N` answer on the screen.
fn last_word(screen: &vt100::Screen) -> u32 {
    let contents = screen.contents();
    let words = contents.split(|c: char| !c.is_ascii_alphanumeric());
    words.filter_map(|w| w.strip_prefix('w')?.parse().ok()).max().unwrap_or(0)
}

#[test]
fn a_prompt_streams_its_answer_once() {
    let setup = Setup::start(5);
    let mut screen = setup.screen();
    screen.send("stream: 12\r");
    screen.wait_for("the first answer", |s| s.contents().contains("w1 w2 w3 w4 w5 w6 w7 w8 w9 w10 w11 w12"));
    screen.send("stream: 4\r");
    // Read off the rendered screen, not the bytes: the chat edits the typed line itself
    // (drawn on the input row, possibly more than once as the keys arrive) and clears it
    // when it is sent, so what a person sees is the prompt once, in the conversation.
    screen.wait_for("the second answer", |s| {
        s.contents().split("» stream: 4").nth(1).is_some_and(|after| after.contains("w1 w2 w3 w4"))
    });
    let contents = screen.contents();
    assert_eq!(contents.matches("w12").count(), 1, "the first answer once:\n{contents}");
    assert_eq!(contents.matches("stream: 12").count(), 1, "the first prompt once:\n{contents}");
    assert_eq!(contents.matches("stream: 4").count(), 1, "the second prompt once:\n{contents}");
    assert_eq!(contents.matches("w1 w2 w3 w4").count(), 2, "each answer once:\n{contents}");
}

/// Issue 36: keys typed while an answer streams stay on the input line below it; the
/// answer on the screen is whole, and Enter sends what was typed.
#[test]
fn typing_during_a_stream_does_not_garble_the_screen() {
    let setup = Setup::start(10);
    let mut screen = setup.screen();
    screen.send("stream: 300\r");
    screen.wait_for("answer streaming", |s| last_word(s) >= 3);
    let typed = "hello there";
    for key in typed.chars() {
        // Each key lands between two words of the answer.
        let before = last_word(screen.terminal.screen());
        screen.send(&key.to_string());
        screen.wait_for("next word", |s| last_word(s) > before);
    }
    assert!(last_word(screen.terminal.screen()) < 300, "the keys were typed while the answer streamed");
    screen.wait_for("whole answer", |s| last_word(s) == 300);
    screen.wait_for("typed text on the input line", |s| s.contents().trim_end().ends_with(typed));
    let answer: Vec<String> = (1..=300).map(|i| format!("w{i}")).collect();
    let contents = screen.contents();
    assert!(contents.contains(&answer.join(" ")), "the answer is garbled:\n{contents}");
    assert_eq!(screen.input_row(), format!("› {typed}"), "the input line:\n{contents}");
    assert_eq!(contents.matches(typed).count(), 1, "typed once, on the input line:\n{contents}");

    screen.send("\r");
    screen.wait_for("answer to the prompt", |s| s.contents().contains("You said: \"hello there\""));
    let contents = screen.contents();
    assert!(contents.contains(&format!("» {typed}\n")), "the prompt is in the conversation:\n{contents}");
    assert!(!contents.contains("›"), "the input line is gone once sent:\n{contents}");
}

/// Issue 36: a prompt sent while an answer streams waits in the queue; saying so does
/// not split the answer.
#[test]
fn a_prompt_sent_during_a_stream_does_not_split_the_answer() {
    let setup = Setup::start(10);
    let mut screen = setup.screen();
    screen.send("stream: 300\r");
    screen.wait_for("answer streaming", |s| last_word(s) >= 3);
    screen.send("echo: next one\r");
    screen.wait_for("answer to the queued prompt", |s| s.contents().contains("next one\n"));
    let contents = screen.contents();
    let answer: Vec<String> = (1..=300).map(|i| format!("w{i}")).collect();
    assert!(contents.contains(&format!("{}\n", answer.join(" "))), "the answer is split:\n{contents}");
    let queued = contents.find("queued (1 in line)").expect("the prompt was queued");
    assert!(queued > contents.find("w300").expect("the answer"), "said after the answer:\n{contents}");
}

#[test]
fn now_says_a_line_to_the_running_agent_which_answers_it_in_the_same_run() {
    let setup = Setup::start(10);
    let mut screen = setup.screen();
    screen.send("stream: 300\r");
    screen.wait_for("answer streaming", |s| last_word(s) >= 3);
    screen.send("/now echo: steered here\r");
    screen.wait_for("the steer's answer", |s| s.contents().contains("» echo: steered here\nsteered here"));
    let contents = screen.contents();
    assert!(contents.contains("sent to the running agent"), "{contents}");
    assert!(!contents.contains("queued ("), "a steer does not queue:\n{contents}");
    let steer = contents.find("» echo: steered here").expect("the steer");
    assert!(steer > contents.find("w300").expect("the answer"), "taken after the model call:\n{contents}");
    screen.send("/now\r");
    screen.wait_for("the usage", |s| s.contents().contains("/now needs the words to say"));
}

#[test]
fn approvals_are_answered_at_the_prompt() {
    let (setup, mut chat) = at_a_terminal(0);
    let write = |file: &str| format!(r#"tool: write {{"path": "{file}", "content": "hi\n"}}"#);

    ask(&mut chat, &write("once.txt"), "write wants to change once.txt");
    chat.exp_string("approve? y = once").expect("how to answer");
    chat.send_line("y").expect("approve");
    chat.exp_string("write: once").expect("the decision");
    chat.exp_string(&raw("✓")).expect("the call's outcome");
    chat.exp_string("Tool write returned").expect("the model's summary");
    assert_eq!(std::fs::read_to_string(setup.project().join("once.txt")).expect("written"), "hi\n");

    ask(&mut chat, &write("no.txt"), "write wants to change no.txt");
    chat.send_line("n not in this project").expect("reject");
    chat.exp_string("write: reject").expect("the decision");
    chat.exp_string(&raw("✗")).expect("the call failed");
    chat.exp_string("Tool write failed").expect("the model was told and went on");
    assert!(!setup.project().join("no.txt").exists(), "a rejected call never runs");

    ask(&mut chat, &write("always.txt"), "write wants to change always.txt");
    chat.send_line("a").expect("always");
    chat.exp_string("write: always").expect("the decision");
    chat.exp_string("Tool write returned").expect("the summary");
    chat.send_line(&write("again.txt")).expect("type");
    let until_summary = chat.exp_string("Tool write returned").expect("ran without asking");
    assert!(!until_summary.contains("approve?"), "`always` covers the next call: {until_summary:?}");
    assert!(setup.project().join("again.txt").exists());
}

/// Issue 36: "always" on a command lists the server's choices (the exact command, then
/// prefixes); `a2` picks the second, which covers `git status` and not `rm`.
#[test]
fn always_on_a_command_picks_one_of_the_offered_patterns() {
    let (_setup, mut chat) = at_a_terminal(0);
    let bash = |command: &str| format!("tool: bash {}", serde_json::json!({ "command": command }));

    ask(&mut chat, &bash("git status --short"), "bash wants to run: git status --short");
    chat.exp_string("always allow: a1 = this exact command, a2 = git status *, a3 = git *").expect("the choices");
    chat.send_line("a9").expect("a choice that is not there");
    chat.exp_string("not one of the \"always\" choices (a1 to a3)").expect("refused here");
    chat.send_line("a2").expect("always, git status *");
    chat.exp_string("bash: always").expect("the decision");
    chat.exp_regex("Tool bash (returned|failed)").expect("the summary");

    chat.send_line(&bash("git status")).expect("type");
    let (until_summary, _) = chat.exp_regex("Tool bash (returned|failed)").expect("ran without asking");
    assert!(!until_summary.contains("approve?"), "`git status *` covers `git status`: {until_summary:?}");
    ask(&mut chat, &bash("rm -rf x"), "bash wants to run: rm -rf x");
}

/// A command with no prefix to offer has one "always" choice, and the chat offers no
/// second one to pick (`a2…` pointed at nothing).
#[test]
fn always_with_a_single_choice_offers_no_other() {
    let (_setup, mut chat) = at_a_terminal(0);
    let command = serde_json::json!({ "command": "for i in 1 2; do echo $i; done" });
    chat.send_line(&format!("tool: bash {command}")).expect("type");
    chat.exp_string("always allow: a1 = this exact command").expect("the one choice");
    let line = chat.exp_string("tell the model why").expect("how to answer");
    assert!(!line.contains("a2"), "no second choice is offered: {line:?}");
}

/// Issue 36: a question of the agent shows its options; a number picks one, words are
/// an answer of one's own, an empty line declines; the chat goes on after each.
#[test]
fn a_question_is_answered_by_number_or_in_words() {
    let (_setup, mut chat) = at_a_terminal(0);
    let question =
        r#"tool: question {"question":"Pick","options":[{"label":"A","description":"the first"},{"label":"B"}]}"#;

    chat.send_line(question).expect("type");
    chat.exp_string("asks: Pick").expect("the question");
    chat.exp_string(&raw("1. A — the first")).expect("the first option");
    chat.exp_string("2. B").expect("the second option");
    chat.exp_string("a number or your own words").expect("how to answer");
    chat.send_line("2").expect("pick B");
    chat.exp_string("question: answered B").expect("the answer is taken");
    chat.exp_string("The person answered: B").expect("the model got it");

    chat.send_line(r#"tool: question {"question":"Name it"}"#).expect("type");
    chat.exp_string("asks: Name it").expect("a question without options");
    chat.send_line("a teapot").expect("answer in words");
    chat.exp_string("The person answered: a teapot").expect("the model got it");

    chat.send_line(question).expect("type");
    chat.exp_string("asks: Pick").expect("the question again");
    chat.send_line("").expect("decline");
    chat.exp_string("question: declined").expect("the decline is taken");
    chat.exp_string("Tool question failed").expect("the model was told and went on");

    chat.send_line("stream: 3").expect("a prompt after the questions");
    chat.exp_string("w1 w2 w3").expect("is a prompt again");
}

/// Issue 36: a command's output shows under its card while it runs, and a long one is
/// cut to its first and last lines.
#[test]
fn a_commands_output_shows_live_and_bounded() {
    let (setup, mut chat) = at_a_terminal(0);
    let bash = |command: &str| format!("tool: bash {}", serde_json::json!({ "command": command }));

    // The command waits for a file the test makes once the first line is on screen.
    ask(
        &mut chat,
        &bash("echo started; until [ -e go ]; do sleep 0.02; done; printf 'l1\\nl2\\n'"),
        "bash wants to run",
    );
    chat.send_line("y").expect("approve");
    chat.exp_string(&raw("│ started")).expect("the output while the command runs");
    std::fs::write(setup.project().join("go"), "").expect("let it finish");
    chat.exp_string(&raw("│ l1")).expect("the rest of the output");
    chat.exp_string(&raw("│ l2")).expect("all of it");
    chat.exp_string(&raw("✓ exit code 0")).expect("the outcome");
    chat.exp_string("Tool bash returned").expect("the summary");

    ask(&mut chat, &bash("seq 1 100"), "bash wants to run: seq 1 100");
    chat.send_line("y").expect("approve");
    let head = chat.exp_string("85 more lines").expect("the middle is left out");
    assert!(head.contains(&raw("│ 10\r\n")) && !head.contains(&raw("│ 11\r\n")), "the first ten lines: {head:?}");
    let tail = chat.exp_string(&raw("✓ exit code 0")).expect("the outcome");
    assert!(tail.contains(&raw("│ 96\r\n")) && tail.contains(&raw("│ 100\r\n")), "the last five: {tail:?}");
    assert!(!tail.contains(&raw("│ 95\r\n")), "only the last five: {tail:?}");
}

/// Issue 36: an edit's approval shows the change as a diff of the file.
#[test]
fn an_edit_approval_shows_its_diff() {
    let (setup, mut chat) = at_a_terminal(0);
    std::fs::write(setup.project().join("a.txt"), "one\ntwo\nthree\n").expect("a file");
    ask(&mut chat, r#"tool: edit {"path":"a.txt","oldString":"two","newString":"2"}"#, "edit wants to change a.txt");
    let diff = chat.exp_string("approve? y = once").expect("how to answer");
    for line in ["@@ -1,3 +1,3 @@", " one", "-two", "+2", " three"] {
        assert!(diff.contains(line), "no {line:?} in the card: {diff:?}");
    }
    assert!(diff.find("-two") < diff.find("+2"), "the old line first: {diff:?}");
    chat.send_line("y").expect("approve");
    chat.exp_string("Tool edit returned").expect("the summary");
    assert_eq!(std::fs::read_to_string(setup.project().join("a.txt")).expect("read"), "one\n2\nthree\n");
}

#[test]
fn ctrl_c_stops_the_run_and_a_second_ctrl_c_exits() {
    let (_setup, mut chat) = at_a_terminal(20);
    chat.send_line("stream: 100000").expect("type");
    chat.exp_string("w3 ").expect("the answer streams");
    chat.send_control('c').expect("Ctrl-C");
    chat.exp_string("stopping the run").expect("the stop is acknowledged");
    chat.exp_string("run stopped").expect("the run ends cancelled");
    chat.send_control('c').expect("Ctrl-C again");
    chat.exp_string("bye").expect("it leaves");
    chat.exp_eof().expect("and exits");
}

#[test]
fn a_restarted_server_is_a_lost_connection_the_chat_recovers_from() {
    let (mut setup, mut chat) = at_a_terminal(0);
    chat.send_line("stream: 5").expect("type");
    chat.exp_string("w1 w2 w3 w4 w5\r\n").expect("the first answer");
    setup.restart();
    chat.exp_string("connection lost").expect("the loss is shown");
    chat.exp_string("reconnected").expect("and the recovery");
    // The new server's stream starts with a snapshot holding the first answer: the
    // chat continues from it without printing that answer again.
    chat.send_line("stream: 7").expect("type");
    let between = chat.exp_string("w1 w2 w3 w4 w5 w6 w7\r\n").expect("the next answer");
    assert!(!between.contains("w5\r\n"), "the first answer was printed again: {between:?}");
}

/// `--json` with a token, as a script drives it: a prompt, an approval answered on
/// standard input, then end of input; every line is one JSON object.
#[test]
fn json_prints_one_event_per_line_and_takes_answers_on_stdin() {
    let setup = Setup::start(0);
    let data = setup.dir.path().join("data");
    let created = common::spool()
        .args(["token", "create", "--user", "alice", "--data-dir"])
        .arg(&data)
        .output()
        .expect("spool token create");
    assert!(created.status.success(), "{}", String::from_utf8_lossy(&created.stderr));
    let token = String::from_utf8(created.stdout).expect("UTF-8").trim().to_owned();

    let refused = setup.chat(&["--json"]).stdin(Stdio::null()).output().expect("run without a token");
    assert!(!refused.status.success(), "auth is on: no token, no chat");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("unauthorized"));

    let mut chat = setup
        .chat(&["--json", "--token", &token])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn spool chat --json");
    let mut stdin = chat.stdin.take().expect("stdin");
    let mut lines = BufReader::new(chat.stdout.take().expect("stdout")).lines();
    let mut seen: Vec<Value> = Vec::new();
    let mut next_until = |seen: &mut Vec<Value>, done: &dyn Fn(&Value) -> bool| loop {
        let line = lines.next().expect("a line before the end").expect("read");
        let value: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("not one JSON object: {line:?}: {e}"));
        seen.push(value.clone());
        if done(&value) {
            return;
        }
    };
    next_until(&mut seen, &|v| v["type"] == "client.snapshot");
    writeln!(stdin, "stream: 3").expect("write");
    next_until(&mut seen, &|v| v["event"]["type"] == "agent_end");
    writeln!(stdin, r#"tool: write {{"path": "j.txt", "content": "j"}}"#).expect("write");
    next_until(&mut seen, &|v| v["type"] == "session.state" && !v["state"]["pendingApprovals"][0].is_null());
    writeln!(stdin, "y").expect("write");
    next_until(&mut seen, &|v| v["type"] == "client.decided");
    drop(stdin);
    for line in lines {
        let line = line.expect("read");
        seen.push(serde_json::from_str(&line).unwrap_or_else(|e| panic!("not one JSON object: {line:?}: {e}")));
    }
    assert!(chat.wait().expect("exit").success(), "end of input, answered: a clean exit");

    let session = seen[0]["sessionId"].as_str().expect("the session comes first").to_owned();
    let frames: Vec<&Value> = seen.iter().filter(|v| v["seq"].is_u64()).collect();
    assert!(frames.iter().all(|f| f["sessionId"] == session.as_str()));
    let seqs: Vec<u64> = frames.iter().map(|f| f["seq"].as_u64().expect("seq")).collect();
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "every frame once, in order: {seqs:?}");
    let text: String = frames
        .iter()
        .filter(|f| f["event"]["assistantMessageEvent"]["type"] == "text_delta")
        .map(|f| f["event"]["assistantMessageEvent"]["delta"].as_str().expect("a delta"))
        .collect();
    assert!(text.starts_with("w1 w2 w3"), "{text:?}");
    let decided = seen.iter().find(|v| v["type"] == "client.decided").expect("the decision");
    assert_eq!(decided["decided"]["decision"], "once");
    let prompts = seen.iter().filter(|v| v["type"] == "client.prompt").count();
    assert_eq!(prompts, 2);
    assert!(seen.iter().any(|v| v["event"]["type"] == "tool_execution_end" && v["event"]["isError"] == false));
    assert_eq!(std::fs::read_to_string(setup.project().join("j.txt")).expect("written"), "j");
    assert_owned_by(&setup, &session, &token);
}

/// The session belongs to the token's user: another caller without it is refused.
fn assert_owned_by(setup: &Setup, session: &str, token: &str) {
    let status = |token: Option<&str>| {
        let mut cmd = setup.chat_on(&["--json"]);
        cmd.args(["--session", session]).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        if let Some(token) = token {
            cmd.args(["--token", token]);
        }
        cmd.output().expect("run").status.success()
    };
    assert!(status(Some(token)), "the owner opens it again");
    assert!(!status(Some("not-a-token")), "a wrong token does not");
}

/// `text` as rexpect's reader sees it: it turns each byte into one `char`, so text
/// beyond ASCII (the ✓ and ✗ of tool cards) is matched byte for byte.
fn raw(text: &str) -> String {
    text.bytes().map(char::from).collect()
}

/// A newcomer who runs `spool chat` before `spool serve` is told what to do, not shown
/// a chain of transport errors.
#[test]
fn no_server_says_how_to_start_one() {
    // A port nothing listens on: bound, then let go.
    let port =
        std::net::TcpListener::bind("127.0.0.1:0").expect("a free port").local_addr().expect("its address").port();
    let server = format!("http://127.0.0.1:{port}");
    let project = tempfile::tempdir().expect("a project directory");
    let out = common::spool()
        .args(["chat", "--server", &server, "--project"])
        .arg(project.path())
        .stdin(Stdio::null())
        .output()
        .expect("spool chat");
    assert!(!out.status.success(), "no server, no chat");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&format!("no Spool server answers at {server}")), "{stderr}");
    assert!(stderr.contains("spool serve"), "it says how to start one: {stderr}");
}

/// Issue 38: an MCP server's question (server-everything's elicitation) asked while
/// its call runs is answered at the prompt, one field per line (Enter keeps a default,
/// a choice by its number), and the server gets the fields.
#[test]
fn a_servers_question_is_answered_field_by_field() {
    let Ok(index) = std::env::var("SPOOL_TEST_MCP_EVERYTHING") else {
        let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false");
        assert!(!ci, "SPOOL_TEST_MCP_EVERYTHING is unset in CI: scripts/test sets it");
        eprintln!("SKIPPED: SPOOL_TEST_MCP_EVERYTHING is unset");
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir_all(dir.path().join("project")).expect("project dir");
    let config = dir.path().join("config.toml");
    let entry = format!(
        "[[permission]]\ntool = \"everything_*\"\naction = \"allow\"\n\n[[mcp]]\nname = \"everything\"\n\
         command = \"node\"\nargs = [{index:?}, \"stdio\"]\n"
    );
    std::fs::write(&config, entry).expect("config");
    let data = dir.path().join("data").to_str().expect("UTF-8").to_owned();
    let root = dir.path().to_str().expect("UTF-8").to_owned();
    let config = config.to_str().expect("UTF-8").to_owned();
    let args = ["--data-dir", &data, "--scripted-delay-ms", "0", "--workspace-root", &root, "--config", &config]
        .map(str::to_owned)
        .to_vec();
    let mut setup = Setup { server: None, base: String::new(), dir, args };
    setup.serve("127.0.0.1:0");
    let timeout = u64::try_from(WAIT.as_millis()).expect("a small timeout");
    let mut chat = rexpect::session::spawn_command(setup.chat(&[]), Some(timeout)).expect("spawn spool chat");
    let (_, opened) = chat.exp_regex("session ses_[0-9a-z]+").expect("the session's id");
    let session = opened.trim_start_matches("session ").to_owned();
    chat.exp_string("type a prompt").expect("the greeting");

    chat.send_line("tool: everything_trigger-elicitation-request {}").expect("type");
    chat.exp_string("everything asks: Please provide inputs").expect("the server's question");
    // The fields come by name: birthdate, check, email, firstLine, homepage, integer,
    // legacyTitledEnum, name, then five more.
    chat.exp_string("[1/13] String with date format").expect("the first field");
    let answers = ["", "y", "", "", "", "7", "2", "Ada", "", "", "", "", ""];
    for answer in answers {
        chat.send_line(answer).expect("answer a field");
    }
    chat.exp_string("answered").expect("the answer is taken");
    chat.exp_string("returned 26 lines").expect("the call ended");
    // What the server said it received is the call's result (the chat shows its first line).
    let url = format!("{}/api/sessions/{session}/messages", setup.base);
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let page: Value = runtime.block_on(async { reqwest::get(url).await?.json().await }).expect("the messages");
    let result = page["messages"].as_array().expect("messages").iter().find(|m| m["role"] == "toolResult");
    let text = result.and_then(|m| m["content"][0]["text"].as_str()).expect("a tool result").to_owned();
    for line in ["- Name: Ada", "- Agreed to terms: true", "- Favorite Integer: 7"] {
        assert!(text.contains(line), "{line:?} in {text}");
    }
}

/// Issue 40: a call of a tool the prompt declared waits for the client that declared
/// it: the chat says so and asks nothing, a typed line is a prompt (queued behind the
/// parked run), and the run goes on once that client posts the result.
#[test]
fn a_client_tool_call_waits_for_its_client_and_asks_nothing_here() {
    let setup = Setup::start(0);
    let timeout = u64::try_from(WAIT.as_millis()).expect("a small timeout");
    let mut chat = rexpect::session::spawn_command(setup.chat(&[]), Some(timeout)).expect("spawn spool chat");
    let (_, opened) = chat.exp_regex("session ses_[0-9a-z]+").expect("the session's id");
    let session = opened.trim_start_matches("session ").to_owned();
    chat.exp_string("type a prompt").expect("the greeting");

    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let client = reqwest::Client::new();
    let prompt = serde_json::json!({
        "text": "tool: get_location {}",
        "tools": [{"name": "get_location", "description": "Where the person is"}],
    });
    let url = format!("{}/api/sessions/{session}/prompt", setup.base);
    runtime.block_on(common::call(client.post(url).json(&prompt)));
    let card = chat.exp_string("waiting for the client to run get_location").expect("the call waits for its client");
    assert!(!card.contains("approve?"), "{card:?}");
    chat.send_line("echo: typed meanwhile").expect("type");
    chat.exp_string("queued (1 in line)").expect("a typed line is a prompt, not an answer");

    let detail = runtime.block_on(common::call(client.get(format!("{}/api/sessions/{session}", setup.base))));
    let approval = detail["state"]["pendingApprovals"][0]["id"].as_str().expect("the call waits").to_owned();
    let url = format!("{}/api/tool-calls/{approval}/result", setup.base);
    runtime.block_on(common::call(client.post(url).json(&serde_json::json!({"output": "Lisbon"}))));
    chat.exp_string("Tool get_location returned 1 line: Lisbon").expect("the model read the client's result");
    chat.exp_string("typed meanwhile").expect("then the queued prompt ran");
}
