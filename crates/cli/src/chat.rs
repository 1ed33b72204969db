//! `spool chat`: a terminal chat with one session, on `spool-client`.
//!
//! Lines typed are prompts (queued behind a run that is going). The answer streams as
//! it is written; tool calls show as cards with their outcome, a command's output
//! under its card as it prints (its first and last lines); an approval is answered at
//! the prompt (`y` once, `a` always, `n MESSAGE` reject and tell the model why), an
//! edit's with the diff of the change above it; the agent's question shows its options
//! and takes a number or words. At a terminal the line being typed stays on its own row
//! below the output (see [`screen`]).
//! Ctrl-C stops the run, a second Ctrl-C exits; Ctrl-D (end of input) leaves once the
//! prompts sent have been answered. A lost connection is recovered by the stream
//! (cursor resume, or a snapshot) and says so.
//!
//! The view is drawn from the folded session state, not from the events: for each
//! message it remembers how much it printed and prints only what is new. So a snapshot
//! after a reconnect continues the text where the screen left it, never twice.
//!
//! `--json` prints one JSON object per line instead: every frame as the server sent it,
//! `client.*` objects for what the client itself saw or did (the session it opened, a
//! snapshot with its state, a lost connection, a prompt's answer, a decision).

mod live_ask;
mod screen;

use anyhow::{Context, bail};
use clap::Args;
use futures::StreamExt;
use screen::{Entered, Screen, Style, Typed};
use serde_json::json;
use spool_client::protocol::api::DecideBody;
use spool_client::protocol::api::{PromptAnswer, PromptBody};
use spool_client::protocol::frame::{SessionState, ToolStatus};
use spool_client::protocol::{
    Approval, ApprovalId, ApprovalKind, Content, Decision, Message, RunId, RunStatus, SessionId,
};
use spool_client::{Client, Event, StreamOptions, Update};
use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::PathBuf;
use tokio::sync::mpsc;

#[derive(Args)]
pub struct ChatArgs {
    /// Continue this session (`ses_…`).
    #[arg(long, value_name = "ID", conflicts_with = "project")]
    session: Option<String>,
    /// Start a new session in this project directory (registered if it is not yet);
    /// the current directory when neither this nor --session is given.
    #[arg(long, value_name = "DIR")]
    project: Option<PathBuf>,
    /// The server's base URL.
    #[arg(long, env = "SPOOL_SERVER", default_value = "http://127.0.0.1:4747", value_name = "URL")]
    server: String,
    /// A token from `spool token create` (not needed while auth is off).
    #[arg(long, env = "SPOOL_TOKEN", value_name = "TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// One JSON object per line (frames and `client.*` notices), for scripts.
    #[arg(long)]
    json: bool,
}

/// The longest prompt line read; longer input is refused before it is sent (the
/// server has its own, smaller limit and says so).
const MAX_LINE: usize = 1 << 20;
/// How much of a tool's arguments or result a card shows.
const CARD_CHARS: usize = 160;
/// A command's output under its card: the first lines as they are printed, and when
/// it ends, the last ones (a line says how many were left out between).
const OUTPUT_HEAD: usize = 10;
const OUTPUT_TAIL: usize = 5;
/// Lines of an edit's diff an approval shows (the server cuts its preview too).
const DIFF_LINES: usize = 60;
/// What the model is told when the person declines its question (the web UI's words).
const DECLINED: &str = "The person declined to answer.";

pub async fn chat(args: ChatArgs) -> anyhow::Result<()> {
    let mut client = Client::new(&args.server)?;
    if let Some(token) = &args.token {
        client = client.with_token(token.clone());
    }
    let session = open_session(&client, &args).await.map_err(|e| unreachable_hint(e, &args.server))?;
    let options = StreamOptions { interactive: true, ..StreamOptions::default() };
    let mut stream = client.follow(&session, options).await.context("cannot follow the session")?;
    let (screen, mut input) = Screen::new(args.json);
    let mut view = View::new(args.json, screen);
    view.opened(&session, client.base());

    let mut input_open = true;
    let mut stopping = false;
    let mut armed = false;
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<String>();
    let mut interrupts = Interrupts::listen().context("cannot listen for Ctrl-C")?;
    loop {
        tokio::select! {
            update = stream.next() => {
                let Some(update) = update else { break };
                if let Event::Failed { error } = &update.event {
                    view.update(&update);
                    bail!("the server ended the stream: {error}");
                }
                let was_busy = view.busy;
                view.update(&update);
                if view.busy && !was_busy && !stopping {
                    armed = false; // A new run: its Ctrl-C stops it again.
                }
                if !view.busy {
                    stopping = false;
                }
            }
            typed = input.recv(), if input_open => match typed {
                Some(Typed::Line(line)) => view.line(&client, &session, line).await,
                Some(Typed::Keys(keys)) => {
                    for entered in view.screen.keys(&keys) {
                        match entered {
                            Entered::Line(line) => view.line(&client, &session, line).await,
                            Entered::End => input_open = false,
                        }
                    }
                }
                None => input_open = false,
            },
            () = interrupts.recv() => {
                if (view.busy || !view.awaiting.is_empty()) && !stopping && !armed {
                    stopping = true;
                    armed = true;
                    view.notice("stopping the run (Ctrl-C again exits)");
                    let (client, session, done) = (client.clone(), session.clone(), done_tx.clone());
                    tokio::spawn(async move {
                        if let Err(e) = client.stop(&session).await {
                            let _ = done.send(format!("cannot stop the run: {e}"));
                        }
                    });
                } else if armed {
                    view.notice("bye");
                    break;
                } else {
                    armed = true;
                    view.notice("nothing is running: Ctrl-C again exits, Ctrl-D leaves");
                }
            }
            Some(message) = done_rx.recv() => view.notice(&message),
        }
        // End of input: leave once what was sent has been answered (an approval no one
        // can answer any more stays pending on the server).
        if !input_open && (view.settled() || view.unanswered().is_some()) {
            break;
        }
    }
    Ok(())
}

/// Ctrl-C presses, heard from the moment the chat starts. One listener lives for the
/// whole loop: a `tokio::signal::ctrl_c()` future made afresh on every turn of the
/// loop misses a press that lands while the loop is busy between two turns (drawing a
/// frame, sending a line), which is how a second Ctrl-C sometimes did not exit.
struct Interrupts {
    #[cfg(unix)]
    signal: tokio::signal::unix::Signal,
}

impl Interrupts {
    fn listen() -> std::io::Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(Self { signal: signal(SignalKind::interrupt())? })
        }
        #[cfg(not(unix))]
        {
            Ok(Self {})
        }
    }

    /// The next press (presses made while none was awaited are kept, as one).
    async fn recv(&mut self) {
        #[cfg(unix)]
        {
            if self.signal.recv().await.is_none() {
                std::future::pending::<()>().await;
            }
        }
        #[cfg(not(unix))]
        {
            if tokio::signal::ctrl_c().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }
}

/// A server that could not be reached at all is most often one not started yet: say
/// so, and how, above the transport's own words.
fn unreachable_hint(error: anyhow::Error, server: &str) -> anyhow::Error {
    let unreachable = error.chain().any(|e| matches!(e.downcast_ref(), Some(spool_client::Error::Transport(_))));
    if !unreachable {
        return error;
    }
    error.context(format!(
        "no Spool server answers at {server}: start one with `spool serve` (in another terminal), or name another with --server"
    ))
}

/// The session named by `--session`, or a new one in `--project` (default: here).
async fn open_session(client: &Client, args: &ChatArgs) -> anyhow::Result<SessionId> {
    if let Some(id) = &args.session {
        let id: SessionId = id.parse().context("--session")?;
        client.session(&id).await.with_context(|| format!("cannot open session {id}"))?;
        return Ok(id);
    }
    let dir = args.project.clone().unwrap_or_else(|| PathBuf::from("."));
    // The server resolves the path on its machine; a local directory is named by its
    // canonical path so it matches the registered one.
    let path = std::fs::canonicalize(&dir).unwrap_or(dir);
    let path = path.to_str().context("the project path is not UTF-8")?.to_owned();
    let projects = client.projects().await.context("cannot list projects")?;
    let project = match projects.into_iter().find(|p| p.path == path) {
        Some(project) => project,
        None => client.create_project(&path, None).await.with_context(|| format!("cannot register {path}"))?,
    };
    Ok(client.create_session(&project.id, None).await.context("cannot start a session")?.id)
}

/// What the terminal shows, and what the loop needs to know about the session.
struct View {
    json: bool,
    screen: Screen,
    /// A run is going.
    busy: bool,
    /// Approvals waiting for an answer, oldest first.
    pending: Vec<Approval>,
    /// Approvals answered from here (a frame from before the answer may still list one).
    answered: HashSet<ApprovalId>,
    /// Bytes of text printed per assistant message index.
    printed: HashMap<u64, usize>,
    /// Messages whose end was printed (their line closed).
    closed: HashSet<u64>,
    users: HashSet<u64>,
    cards: HashSet<String>,
    outcomes: HashSet<String>,
    asked: HashSet<ApprovalId>,
    /// Lines of a running command's output seen so far, by call id (those past
    /// [`OUTPUT_HEAD`] are counted, not printed).
    output_lines: HashMap<String, usize>,
    /// Runs whose end was reported, by user message index.
    reported: HashSet<u64>,
    /// Runs started from here and not yet settled, and queued prompts (request ids).
    awaiting: HashSet<RunId>,
    queued: HashSet<String>,
    at_line_start: bool,
    /// Notices held until the line being streamed ends (see `after_the_line`).
    waiting_notices: Vec<String>,
    first: bool,
    /// The server's question (a live ask) being answered field by field.
    filling: Option<live_ask::Filling>,
}

impl View {
    fn new(json: bool, screen: Screen) -> View {
        View {
            json,
            screen,
            busy: false,
            pending: Vec::new(),
            answered: HashSet::new(),
            printed: HashMap::new(),
            closed: HashSet::new(),
            users: HashSet::new(),
            cards: HashSet::new(),
            outcomes: HashSet::new(),
            asked: HashSet::new(),
            output_lines: HashMap::new(),
            reported: HashSet::new(),
            awaiting: HashSet::new(),
            queued: HashSet::new(),
            at_line_start: true,
            waiting_notices: Vec::new(),
            first: true,
            filling: None,
        }
    }

    fn opened(&mut self, session: &SessionId, server: &str) {
        if self.json {
            emit(&json!({"type": "client.session", "sessionId": session, "server": server}));
        } else {
            self.print(&format!(
                "session {session} on {server}\ntype a prompt; /now TEXT says it to a running agent; Ctrl-C stops a run, twice exits; Ctrl-D leaves\n"
            ));
        }
    }

    /// The oldest approval still waiting for an answer from here.
    fn unanswered(&self) -> Option<&Approval> {
        self.pending.iter().find(|a| !self.answered.contains(&a.id))
    }

    /// The oldest approval still waiting that a typed line answers: not a client tool
    /// call, which waits for the client that declared the tool, not for a person.
    fn answerable(&self) -> Option<&Approval> {
        self.pending.iter().find(|a| !self.answered.contains(&a.id) && !a.is_client_call())
    }

    /// Nothing sent from here is still running or waiting in the queue.
    fn settled(&self) -> bool {
        !self.busy && self.awaiting.is_empty() && self.queued.is_empty()
    }

    fn update(&mut self, update: &Update) {
        let state = &update.state;
        self.busy = state.active_run.is_some();
        self.pending = state.pending_approvals.clone();
        // A server's question answered elsewhere, expired or cancelled: the next one's turn.
        if self.filling.as_ref().is_some_and(|f| !self.pending.iter().any(|a| a.id == f.approval)) {
            self.filling = None;
            self.next_live();
        }
        self.awaiting.retain(|run| {
            !state.prompt_timings.values().any(|t| t.run_id.as_ref() == Some(run) && t.ended_at.is_some())
        });
        self.queued.retain(|request| {
            state.queue.iter().any(|q| &q.request_id == request)
                || state.active_run.as_ref().is_some_and(|r| &r.request_id == request)
        });
        if self.json {
            self.json_update(update);
        } else {
            self.draw(update);
        }
        self.first = false;
    }

    fn json_update(&mut self, update: &Update) {
        let line = match &update.event {
            Event::Snapshot => json!({"type": "client.snapshot", "state": &*update.state}),
            Event::Frame(frame) => serde_json::to_value(frame).expect("frames serialize"),
            Event::Disconnected { reason, retry_in } => {
                json!({"type": "client.disconnected", "reason": reason, "retryInMs": retry_in.as_millis() as u64})
            }
            Event::Reconnected => json!({"type": "client.reconnected"}),
            Event::Resync { reason } => json!({"type": "client.resync", "reason": reason}),
            Event::Failed { error } => json!({"type": "client.failed", "error": error}),
            _ => return,
        };
        emit(&line);
    }

    fn draw(&mut self, update: &Update) {
        match &update.event {
            Event::Disconnected { reason, retry_in } => {
                return self
                    .notice(&format!("connection lost ({reason}); reconnecting in {:.1} s", retry_in.as_secs_f32()));
            }
            Event::Reconnected => return self.notice("reconnected"),
            Event::Resync { reason } => return self.notice(&format!("catching up ({reason})")),
            Event::Failed { error } => return self.notice(&format!("the stream ended: {error}")),
            _ => {}
        }
        let state = &update.state;
        let mut indexes: Vec<u64> =
            state.messages.iter().map(|m| m.index).chain(state.drafts.keys().copied()).collect();
        indexes.sort_unstable();
        indexes.dedup();
        for index in indexes {
            let committed = state.messages.iter().rev().find(|m| m.index == index).map(|m| &m.message);
            let draft = state.drafts.get(&index);
            match committed.or(draft) {
                Some(message @ Message::User { .. }) => self.user(index, message),
                Some(message @ Message::Assistant { content, .. }) => {
                    self.text(index, &message.text());
                    if committed.is_some() {
                        self.end_line(index);
                        for block in content {
                            if let Content::ToolCall { id, name, arguments } = block {
                                self.card(state, id, name, arguments);
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        for approval in &state.pending_approvals.clone() {
            self.ask(approval);
        }
        self.run_ends(state);
        if self.at_line_start {
            for text in std::mem::take(&mut self.waiting_notices) {
                self.notice(&text);
            }
        }
    }

    fn user(&mut self, index: u64, message: &Message) {
        if !self.users.insert(index) {
            return;
        }
        // Typed here or elsewhere, the prompt shows where the conversation has it (a
        // queued one when its run starts); the line it was typed on is cleared.
        self.line_break();
        self.print(&format!("» {}\n", message.text().trim_end()));
    }

    /// Prints what is new of an assistant message's text.
    fn text(&mut self, index: u64, text: &str) {
        let printed = self.printed.entry(index).or_insert(0);
        // The text only grows; anything else (a state repaired differently) is taken
        // as printed rather than shown twice.
        if *printed > text.len() || !text.is_char_boundary(*printed) {
            *printed = text.len();
            return;
        }
        let new = &text[*printed..];
        *printed = text.len();
        if !new.is_empty() {
            self.print(new);
        }
    }

    fn end_line(&mut self, index: u64) {
        if self.closed.insert(index) {
            self.line_break();
        }
    }

    fn card(&mut self, state: &SessionState, id: &str, name: &str, arguments: &serde_json::Value) {
        if self.cards.insert(id.to_owned()) {
            // A question is on its own card below; its call shows just the question.
            let main = match name {
                "question" => arguments["question"].as_str().map(str::to_owned),
                _ => spool_tools::main_argument(name, arguments),
            };
            let shown = main.unwrap_or_else(|| arguments.to_string());
            self.line_break();
            self.print(&format!("  ⚙ {name} {}\n", cut(&shown, CARD_CHARS)));
        }
        let Some(execution) = state.tool_executions.get(id) else { return };
        if execution.status == ToolStatus::Running {
            if let Some(output) = &execution.output {
                self.live_output(id, output);
            }
            return;
        }
        if !self.outcomes.insert(id.to_owned()) {
            return;
        }
        let result = execution.result.as_deref().unwrap_or("");
        let (first, rest) = result.split_once('\n').unwrap_or((result, ""));
        let mark = if execution.status == ToolStatus::Error { "✗" } else { "✓" };
        if name == "bash" {
            // Its result is how it ended, then what it printed.
            self.output_end(id, rest);
            return self.print(&format!("    {mark} {}\n", cut(first, CARD_CHARS)));
        }
        let lines = result.lines().count();
        let more = if lines > 1 { format!(" (+{} lines)", lines - 1) } else { String::new() };
        self.print(&format!("    {mark} {}{more}\n", cut(first, CARD_CHARS)));
    }

    /// Prints the new whole lines of a running command's output, up to [`OUTPUT_HEAD`].
    fn live_output(&mut self, id: &str, output: &str) {
        let seen = self.output_lines.get(id).copied().unwrap_or(0);
        let whole: Vec<&str> = output.split_inclusive('\n').filter(|l| l.ends_with('\n')).collect();
        for line in whole.iter().skip(seen).take(OUTPUT_HEAD.saturating_sub(seen)) {
            self.output_line(line);
        }
        self.output_lines.insert(id.to_owned(), whole.len().max(seen));
    }

    /// The rest of a finished command's output: the first lines not printed while it
    /// ran, and past [`OUTPUT_HEAD`] how many are left out and the last ones.
    fn output_end(&mut self, id: &str, output: &str) {
        let lines: Vec<&str> = output.lines().collect();
        let printed = self.output_lines.remove(id).unwrap_or(0).min(OUTPUT_HEAD);
        let head = lines.len().min(OUTPUT_HEAD);
        for line in lines.iter().take(head).skip(printed) {
            self.output_line(line);
        }
        let tail = lines.len().saturating_sub(head).min(OUTPUT_TAIL);
        let left_out = lines.len() - head - tail;
        if left_out > 0 {
            self.styled(&format!("    │ … {left_out} more lines\n"), Style::Dim);
        }
        for line in &lines[lines.len() - tail..] {
            self.output_line(line);
        }
    }

    fn output_line(&mut self, line: &str) {
        self.styled(&format!("    │ {}\n", cut(line.trim_end_matches(['\n', '\r']), CARD_CHARS)), Style::Dim);
    }

    fn ask(&mut self, approval: &Approval) {
        if !self.asked.insert(approval.id.clone()) {
            return;
        }
        let payload = &approval.payload;
        if approval.is_live_ask() {
            return self.ask_live(approval);
        }
        if approval.is_client_call() {
            // A tool the prompt declared: its client runs it and posts the result.
            self.line_break();
            return self.print(&format!("  … waiting for the client to run {}\n", approval.tool));
        }
        if is_question(approval) {
            return self.ask_question(payload);
        }
        let argument = payload["argument"].as_str().unwrap_or("");
        self.line_break();
        let options = always_options(approval);
        // What the tool would do, in words: a command runs, a write or an edit changes
        // a file; any other tool that asks is named with its argument.
        let wants = match approval.tool.as_str() {
            _ if options.is_some() => "wants to run:",
            "write" | "edit" => "wants to change",
            _ => "wants approval for",
        };
        self.print(&format!("  ? {} {wants} {argument}\n", approval.tool));
        if let Some(change) = payload["change"].as_str().filter(|c| !c.is_empty() && *c != argument) {
            self.print(&format!("    {}\n", cut(change, CARD_CHARS)));
        }
        if let Some(preview) = payload["preview"].as_str() {
            self.preview(preview);
        }
        match options {
            Some(options) if options.is_empty() => {
                self.print("    (no \"always\" for this command: it holds what looks like a secret)\n");
                self.print("    approve? y = once, n MESSAGE = reject and tell the model why\n");
            }
            Some(options) => {
                // A command: "always" is one of the options the server offers, never all
                // of the tool; `a` alone is the exact command.
                let listed: Vec<String> = options
                    .iter()
                    .enumerate()
                    .map(|(i, o)| {
                        let what = if o.exact { "this exact command".to_owned() } else { o.label.clone() };
                        format!("a{} = {what}", i + 1)
                    })
                    .collect();
                self.print(&format!("    always allow: {}\n", listed.join(", ")));
                // `a2…` only when there is a second choice to pick.
                let pick = if listed.len() > 1 { ", a2… = always for that choice" } else { "" };
                self.print(&format!(
                    "    approve? y = once, a = always (this exact command){pick}, n MESSAGE = reject and tell the model why\n"
                ));
            }
            None => self.print("    approve? y = once, a = always, n MESSAGE = reject and tell the model why\n"),
        }
    }

    /// The agent's question, its numbered options, and how to answer.
    fn ask_question(&mut self, payload: &serde_json::Value) {
        let question = payload["question"].as_str().unwrap_or("(no question given)");
        self.line_break();
        self.print(&format!("  ? the agent asks: {}\n", question.trim_end()));
        let options = question_options(payload);
        for (n, (label, description)) in options.iter().enumerate() {
            let description = description.as_deref().map(|d| format!(" — {}", cut(d, CARD_CHARS))).unwrap_or_default();
            self.print(&format!("    {}. {}{description}\n", n + 1, cut(label, CARD_CHARS)));
        }
        if options.is_empty() {
            self.print("    answer in your own words; an empty line declines\n");
        } else {
            self.print("    answer with a number or your own words; an empty line declines\n");
        }
    }

    /// The server's preview of a change (a unified diff), or why the call would fail.
    fn preview(&mut self, preview: &str) {
        if !preview.starts_with("--- ") && !preview.starts_with("@@") {
            return self.print(&format!("    {}\n", cut(preview, CARD_CHARS)));
        }
        // The file's name is on the card already.
        let lines: Vec<&str> = preview.lines().filter(|l| !l.starts_with("--- ") && !l.starts_with("+++ ")).collect();
        for line in lines.iter().take(DIFF_LINES) {
            let style = match line.as_bytes().first() {
                Some(b'+') => Style::Added,
                Some(b'-') => Style::Removed,
                Some(b'@') => Style::Hunk,
                _ => Style::Plain,
            };
            self.styled(&format!("    {line}\n"), style);
        }
        if lines.len() > DIFF_LINES {
            self.print(&format!("    … {} more lines of the change\n", lines.len() - DIFF_LINES));
        }
    }

    /// A run that ended other than completed says how.
    fn run_ends(&mut self, state: &SessionState) {
        for timing in state.prompt_timings.values() {
            let Some(status) = timing.status.filter(|_| timing.ended_at.is_some()) else { continue };
            if !self.reported.insert(timing.user_message_index) || self.first {
                continue;
            }
            match status {
                RunStatus::Cancelled => self.notice("run stopped"),
                RunStatus::Failed => {
                    let why = timing.error.as_ref().map_or("no reason given", |e| e.message.as_str());
                    self.notice(&format!("run failed: {why}"));
                }
                _ => {}
            }
        }
    }

    /// One line typed: the answer to the oldest pending approval, or a prompt.
    async fn line(&mut self, client: &Client, session: &SessionId, line: String) {
        if line.len() > MAX_LINE {
            return self.problem(&format!("that line is over {MAX_LINE} bytes; not sent"));
        }
        let text = line.trim();
        // Before any answer: a steer may go to a run parked at an approval too.
        if let Some(steer) = text.strip_prefix("/now").filter(|rest| rest.is_empty() || rest.starts_with(' ')) {
            let request_id = format!("chat-{}", RunId::new().as_str().trim_start_matches("run_"));
            return self.steer(client, session, steer.trim(), &request_id).await;
        }
        if let Some(approval) = self.unanswered().filter(|a| a.is_live_ask()).cloned() {
            return self.answer_live(client, session, &approval, text).await;
        }
        if let Some(approval) = self.answerable().filter(|a| is_question(a)).cloned() {
            return self.answer_question(client, session, &approval, text).await;
        }
        if text.is_empty() {
            return;
        }
        if let Some(approval) = self.answerable().cloned() {
            return self.answer(client, session, &approval, text).await;
        }
        let request_id = format!("chat-{}", RunId::new().as_str().trim_start_matches("run_"));
        let body =
            PromptBody { text: text.to_owned(), request_id: Some(request_id), queue: true, ..PromptBody::default() };
        match client.prompt(session, &body).await {
            Ok(answer) => {
                if self.json {
                    emit(&json!({"type": "client.prompt", "answer": answer}));
                }
                match answer {
                    PromptAnswer::Started(run) => {
                        self.awaiting.insert(run.run_id);
                    }
                    PromptAnswer::Queued(queued) => {
                        self.queued.insert(queued.request_id);
                        if !self.json {
                            self.after_the_line(&format!(
                                "queued ({} in line) · /now TEXT says it to the running agent instead",
                                queued.position
                            ));
                        }
                    }
                }
            }
            Err(e) => self.problem(&format!("the prompt was not sent: {e}")),
        }
    }

    /// `/now TEXT`: a steer. The running run reads it at its next step, and it shows
    /// where the conversation takes it; with no run going it is an ordinary prompt.
    async fn steer(&mut self, client: &Client, session: &SessionId, text: &str, request_id: &str) {
        if text.is_empty() {
            return self.problem("/now needs the words to say: /now TEXT");
        }
        match client.steer(session, text, request_id).await {
            Ok(steered) => {
                if self.json {
                    emit(&json!({"type": "client.steer", "messageId": steered.message_id, "runId": steered.run_id}));
                } else if steered.run_id.is_some() {
                    self.after_the_line("sent to the running agent: it reads it at its next step");
                } else {
                    self.after_the_line("no run is going: sent as a prompt");
                }
            }
            Err(e) => self.problem(&format!("the message was not sent: {e}")),
        }
    }

    async fn answer(&mut self, client: &Client, session: &SessionId, approval: &Approval, text: &str) {
        let (word, rest) = text.split_once(char::is_whitespace).map_or((text, ""), |(w, r)| (w, r.trim()));
        let word = word.to_ascii_lowercase();
        // `a2`, `a 2` or `always 2`: the second of the offered "always" options.
        let choice = match (word.as_str(), word.strip_prefix('a').filter(|n| !n.is_empty())) {
            ("a" | "always", _) if !rest.is_empty() => Some(rest),
            (_, Some(number)) if number.bytes().all(|b| b.is_ascii_digit()) => Some(number),
            _ => None,
        };
        if let Some(choice) = choice {
            let options = always_options(approval).unwrap_or_default();
            let Some(option) = choice.parse::<usize>().ok().and_then(|n| options.get(n.checked_sub(1)?)) else {
                let many = options.len();
                return self.problem(&format!(
                    "{choice:?} is not one of the \"always\" choices (a1 to a{many}); answer again"
                ));
            };
            let decided = client.approve_always_with(session, &approval.id, option.patterns.clone()).await;
            return self.decided(approval, decided);
        }
        let decided = match word.as_str() {
            "y" | "yes" | "once" => client.approve_once(session, &approval.id).await,
            "a" | "always" => client.approve_always(session, &approval.id).await,
            "n" | "no" | "reject" => client.reject(session, &approval.id, Some(rest).filter(|r| !r.is_empty())).await,
            _ => {
                return self
                    .problem("answer y (approve once), a (always) or n MESSAGE (reject, telling the model why)");
            }
        };
        self.decided(approval, decided);
    }

    /// The answer to the agent's question: an option's number, words of one's own, or
    /// nothing (or `/decline`), which declines and tells the model so.
    async fn answer_question(&mut self, client: &Client, session: &SessionId, approval: &Approval, text: &str) {
        let options = question_options(&approval.payload);
        let body = if text.is_empty() || text == "/decline" {
            DecideBody { decision: Decision::Reject, message: Some(DECLINED.to_owned()), ..decide_body() }
        } else {
            let answer = match text.parse::<usize>() {
                Ok(n) if !options.is_empty() => {
                    let Some((label, _)) = n.checked_sub(1).and_then(|i| options.get(i)) else {
                        let many = options.len();
                        return self.problem(&format!(
                            "{n} is not one of the options (1 to {many}); answer again, in words if you like"
                        ));
                    };
                    label.clone()
                }
                _ => text.to_owned(),
            };
            DecideBody { decision: Decision::Fill(json!({ "answer": answer })), ..decide_body() }
        };
        let decided = client.decide(session, &approval.id, &body).await;
        self.decided(approval, decided);
    }

    /// Says how a decision went.
    fn decided(
        &mut self,
        approval: &Approval,
        decided: Result<spool_client::protocol::api::Decided, spool_client::Error>,
    ) {
        match decided {
            Ok(decided) => {
                self.answered.insert(approval.id.clone());
                if self.json {
                    emit(&json!({"type": "client.decided", "decided": decided}));
                } else if is_question(approval) {
                    let answer = match &decided.decision {
                        Decision::Fill(fill) => match fill["answer"].as_str() {
                            Some(answer) => format!("answered {answer}"),
                            None => "answered".to_owned(),
                        },
                        _ => "declined".to_owned(),
                    };
                    self.notice(&format!("{}: {}", approval.tool, cut(&answer, CARD_CHARS)));
                } else {
                    self.notice(&format!("{}: {}", approval.tool, decided.decision.label()));
                }
            }
            Err(e) => self.problem(&format!("the answer was not taken: {e}")),
        }
    }

    /// A notice that waits for the line being streamed to end, so as not to split it.
    fn after_the_line(&mut self, text: &str) {
        if self.at_line_start {
            self.notice(text);
        } else {
            self.waiting_notices.push(text.to_owned());
        }
    }

    fn notice(&mut self, text: &str) {
        if self.json {
            return emit(&json!({"type": "client.notice", "message": text}));
        }
        self.line_break();
        self.print(&format!("  · {text}\n"));
    }

    fn problem(&mut self, text: &str) {
        if self.json {
            return emit(&json!({"type": "client.error", "message": text}));
        }
        self.line_break();
        self.print(&format!("  ! {text}\n"));
    }

    fn line_break(&mut self) {
        if !self.at_line_start {
            self.print("\n");
        }
    }

    fn print(&mut self, text: &str) {
        self.styled(text, Style::Plain);
    }

    fn styled(&mut self, text: &str, style: Style) {
        self.screen.write(text, style);
        if let Some(last) = text.chars().last() {
            self.at_line_start = last == '\n';
        }
    }
}

fn emit(value: &serde_json::Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{value}").and_then(|()| out.flush());
}

/// At most `max` characters of the first line of `text`, with `…` when cut.
fn cut(text: &str, max: usize) -> String {
    let line = text.lines().next().unwrap_or("");
    match line.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None if line.len() < text.trim_end().len() => format!("{line} …"),
        None => line.to_owned(),
    }
}

/// An approval that is the agent's question (the `question` tool), answered in words.
fn is_question(approval: &Approval) -> bool {
    matches!(approval.kind, ApprovalKind::SelectOption | ApprovalKind::ProvideInput)
}

/// A question's options: each one's label and description.
fn question_options(payload: &serde_json::Value) -> Vec<(String, Option<String>)> {
    let options = payload["options"].as_array().map(Vec::as_slice).unwrap_or_default();
    options
        .iter()
        .filter_map(|o| {
            let label = o["label"].as_str()?.to_owned();
            Some((label, o["description"].as_str().filter(|d| !d.is_empty()).map(str::to_owned)))
        })
        .collect()
}

fn decide_body() -> DecideBody {
    DecideBody { decision: Decision::Once, message: None, idempotency_key: None, pattern: None, patterns: None }
}

/// The "always" options an approval of a command offers (`payload.alwaysOptions`), or
/// `None` for another tool, whose "always" allows the tool.
fn always_options(approval: &Approval) -> Option<Vec<spool_client::protocol::AlwaysOption>> {
    serde_json::from_value(approval.payload.get("alwaysOptions")?.clone()).ok()
}
