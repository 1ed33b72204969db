//! The `Tool` trait and the registry the agent loop looks tools up in.
//!
//! A tool never fails the run: whatever goes wrong (bad arguments, a path outside the
//! project, a missing file) becomes a result with `is_error` that the model reads and
//! can react to.
//!
//! A tool that changes one file (`write`, `edit`) also says what it would change
//! ([`Tool::inspect`]): a fingerprint of the file and a preview of the change. The
//! approval keeps the fingerprint from the moment it is asked, and an approving decision
//! re-reads it: a person approves the change they were shown, never a change to a file
//! that moved on meanwhile.

use crate::model::ToolSpec;
use async_trait::async_trait;
use spool_protocol::event::{LIVE_OUTPUT_CAP, LIVE_OUTPUT_CHUNK, LIVE_OUTPUT_INTERVAL_MS};
use spool_protocol::{CallSubject, SessionId};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// What a tool call may touch and how it is stopped.
#[derive(Clone, Debug)]
pub struct ToolContext {
    /// The project directory, canonical. Tools act only inside it.
    pub root: PathBuf,
    /// Which directory `root` named when the project was registered: a tool opens
    /// `root` with no symbolic link on the way and refuses it unless it is still that
    /// directory. `None` (a project from before it was kept, a test) checks links only.
    pub root_id: Option<spool_protocol::DirIdentity>,
    /// Cancelled when the run is aborted; long tools must stop promptly.
    pub cancel: CancellationToken,
    /// Spool's data directory, canonical: no tool path may resolve into it and no walk
    /// descends into it, even if it lies under `root` (a project registered before
    /// that was refused).
    pub data_dir: Option<PathBuf>,
    /// Where a tool that prints while it runs (`bash`) reports its output as it comes;
    /// the run streams it as `tool_execution_update`. A no-op outside a run.
    pub progress: ToolProgress,
    /// How a tool asks the person something while it runs (an MCP server's
    /// elicitation) without parking the run. Outside a run, every ask is cancelled.
    pub asker: LiveAsker,
    /// How a tool asks the session's model for a completion while it runs (an MCP
    /// server's sampling request). Outside a run, every request is refused.
    pub sampler: Sampler,
}

/// A question a running tool puts to the person (an MCP `elicitation/create`): the run
/// stays `running` and the call waits for the answer, unlike the `question` tool, which
/// parks the run.
#[derive(Clone, Debug, PartialEq)]
pub struct LiveAsk {
    /// Who asks (an MCP server's configured name), shown on the card.
    pub source: String,
    pub message: String,
    /// A JSON schema of the fields asked for: an object of flat properties (strings,
    /// numbers, booleans, enums), as MCP's elicitation allows.
    pub schema: serde_json::Value,
}

/// The person's answer to a [`LiveAsk`].
#[derive(Clone, Debug, PartialEq)]
pub enum LiveAnswer {
    /// The fields, an object matching the schema.
    Accept(serde_json::Value),
    /// The person said no.
    Decline,
    /// Nobody answered: the ask expired, the run stopped, or no one can be asked here.
    Cancel,
}

/// Who answers a running tool's [`LiveAsk`]: the run that called the tool.
#[async_trait]
pub trait AskPerson: Send + Sync + 'static {
    async fn ask(&self, ask: LiveAsk) -> LiveAnswer;
}

/// A tool's way to a person while it runs ([`ToolContext::asker`]); the default asks
/// no one and every ask is [`LiveAnswer::Cancel`].
#[derive(Clone, Default)]
pub struct LiveAsker {
    person: Option<Arc<dyn AskPerson>>,
}

impl LiveAsker {
    pub fn new(person: Arc<dyn AskPerson>) -> LiveAsker {
        LiveAsker { person: Some(person) }
    }

    pub async fn ask(&self, ask: LiveAsk) -> LiveAnswer {
        match &self.person {
            Some(person) => person.ask(ask).await,
            None => LiveAnswer::Cancel,
        }
    }
}

impl std::fmt::Debug for LiveAsker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveAsker").field("person", &self.person.is_some()).finish()
    }
}

/// A completion a running tool asks of the session's model (an MCP server's
/// `sampling/createMessage`): one request with no tools offered.
#[derive(Clone, Debug, PartialEq)]
pub struct SampleRequest {
    pub system: Option<String>,
    /// The conversation to continue, oldest first, text only.
    pub messages: Vec<SampleMessage>,
    /// Most tokens the answer may take, as the asker wants it; the run caps it further.
    pub max_tokens: u32,
}

/// One message of a [`SampleRequest`].
#[derive(Clone, Debug, PartialEq)]
pub struct SampleMessage {
    /// Whether the model said it (else the user did).
    pub assistant: bool,
    pub text: String,
}

/// The model's answer to a [`SampleRequest`].
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// The model that answered, by the name Spool shows (`openai:gpt-4o`, `scripted`).
    pub model: String,
    pub text: String,
    /// The answer reached the token limit and was cut there.
    pub cut: bool,
}

/// Why a [`SampleRequest`] got no answer.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SampleError {
    /// No run lends its model here (a tool called outside a run).
    #[error("no run is there to lend its model")]
    NoModel,
    /// The run was stopped while the model answered.
    #[error("the run was stopped")]
    Stopped,
    /// The model refused or failed.
    #[error("the model failed: {0}")]
    Model(String),
}

/// Who answers a running tool's [`SampleRequest`]: the run that called the tool.
#[async_trait]
pub trait SampleModel: Send + Sync + 'static {
    async fn sample(&self, request: SampleRequest) -> Result<Sample, SampleError>;
}

/// A tool's way to the session's model while it runs ([`ToolContext::sampler`]); the
/// default has no model and every request is [`SampleError::NoModel`].
#[derive(Clone, Default)]
pub struct Sampler {
    model: Option<Arc<dyn SampleModel>>,
}

impl Sampler {
    pub fn new(model: Arc<dyn SampleModel>) -> Sampler {
        Sampler { model: Some(model) }
    }

    pub async fn sample(&self, request: SampleRequest) -> Result<Sample, SampleError> {
        match &self.model {
            Some(model) => model.sample(request).await,
            None => Err(SampleError::NoModel),
        }
    }
}

impl std::fmt::Debug for Sampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sampler").field("model", &self.model.is_some()).finish()
    }
}

/// A tool's live output, from the tool to the run that streams it.
///
/// The tool calls [`ToolProgress::report`] with raw bytes as they arrive; it never
/// blocks and never waits for the reader. What the reader has not taken yet waits in a
/// buffer that the cap bounds: once [`LIVE_OUTPUT_CAP`] bytes have been reported the
/// rest is dropped and the reader's last chunk says `truncated`. The reader
/// ([`ProgressReader`]) coalesces: it hands out a chunk once [`LIVE_OUTPUT_CHUNK`]
/// bytes wait, or [`LIVE_OUTPUT_INTERVAL_MS`] after its previous chunk, whichever
/// comes first, so a chatty command costs a bounded number of frames.
#[derive(Clone, Debug, Default)]
pub struct ToolProgress {
    shared: Option<Arc<Shared>>,
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<Pending>,
    wake: Notify,
}

#[derive(Debug, Default)]
struct Pending {
    bytes: Vec<u8>,
    /// Bytes accepted so far (what counts against the cap).
    accepted: usize,
    truncated: bool,
}

impl ToolProgress {
    /// A connected pair: the tool's end and the run's.
    pub fn channel() -> (ToolProgress, ProgressReader) {
        let shared = Arc::new(Shared::default());
        let reader = ProgressReader { shared: shared.clone(), last: None, done: false };
        (ToolProgress { shared: Some(shared) }, reader)
    }

    /// Output the tool just received (stdout and stderr in the order they came).
    pub fn report(&self, bytes: &[u8]) {
        let Some(shared) = &self.shared else { return };
        let mut pending = shared.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if pending.truncated || bytes.is_empty() {
            return;
        }
        let take = (LIVE_OUTPUT_CAP - pending.accepted).min(bytes.len());
        pending.bytes.extend_from_slice(&bytes[..take]);
        pending.accepted += take;
        pending.truncated = take < bytes.len();
        // Every report wakes the reader, which decides whether a chunk is due: a wake
        // costs little next to the read that produced the bytes.
        drop(pending);
        shared.wake.notify_one();
    }
}

/// One piece of live output, as text.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProgressChunk {
    pub text: String,
    /// The cap was reached; this is the last chunk.
    pub truncated: bool,
}

/// The run's end of a [`ToolProgress`] channel.
#[derive(Debug)]
pub struct ProgressReader {
    shared: Arc<Shared>,
    /// When the previous chunk was handed out.
    last: Option<Instant>,
    done: bool,
}

impl ProgressReader {
    /// The next chunk, once one is due (see [`ToolProgress`]); after the truncated
    /// chunk, never. Cancel-safe: nothing is taken until it is returned.
    pub async fn next(&mut self) -> ProgressChunk {
        loop {
            if self.done {
                return std::future::pending().await;
            }
            let shared = self.shared.clone();
            let notified = shared.wake.notified();
            let (waiting, full) = {
                let p = self.shared.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                (!p.bytes.is_empty(), p.bytes.len() >= LIVE_OUTPUT_CHUNK || p.truncated)
            };
            let due = self.last.map(|t| t + Duration::from_millis(LIVE_OUTPUT_INTERVAL_MS));
            if full || (waiting && due.is_none_or(|d| d <= Instant::now())) {
                let chunk = self.take(false);
                if !chunk.text.is_empty() || chunk.truncated {
                    return chunk;
                }
                // Only part of a character waits: wait for the rest of it.
            }
            match due.filter(|_| waiting) {
                Some(due) => {
                    tokio::select! {
                        () = notified => {}
                        () = tokio::time::sleep_until(due) => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    /// Everything still waiting, now (the call has ended or is being stopped), with a
    /// character cut off at the end shown as U+FFFD.
    pub fn rest(&mut self) -> ProgressChunk {
        if self.done { ProgressChunk::default() } else { self.take(true) }
    }

    fn take(&mut self, all: bool) -> ProgressChunk {
        let mut p = self.shared.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // A character cut between two reads waits for its other bytes, unless this is
        // the end: the cap, or the call is over.
        let cut = if all || p.truncated { p.bytes.len() } else { complete_utf8_prefix(&p.bytes) };
        let bytes: Vec<u8> = p.bytes.drain(..cut).collect();
        let truncated = p.truncated;
        drop(p);
        self.done = truncated;
        if !bytes.is_empty() || truncated {
            self.last = Some(Instant::now());
        }
        ProgressChunk { text: String::from_utf8_lossy(&bytes).into_owned(), truncated }
    }
}

/// The length of `bytes` without a UTF-8 character cut off at its end (invalid bytes
/// before it count: they become U+FFFD either way).
fn complete_utf8_prefix(bytes: &[u8]) -> usize {
    let start = bytes.len().saturating_sub(3);
    for i in (start..bytes.len()).rev() {
        let b = bytes[i];
        if b & 0b1100_0000 == 0b1000_0000 {
            continue;
        }
        // A lead byte (or ASCII): is its character complete?
        let need = match b {
            0x00..=0x7f => 1,
            0xc0..=0xdf => 2,
            0xe0..=0xef => 3,
            0xf0..=0xf7 => 4,
            _ => 1,
        };
        return if bytes.len() - i >= need { bytes.len() } else { i };
    }
    bytes.len()
}

/// How shell commands are confined on this server, as `/api/health` reports it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SandboxStatus {
    /// Landlock confines commands (writes only under the project, no reads of the data
    /// directory). `false` where the kernel lacks it: commands then run unconfined.
    pub landlock: bool,
    /// The kernel's Landlock ABI version, 0 without Landlock.
    pub abi: u32,
    /// Every restriction asked for is enforced (an older ABI may enforce only some).
    pub fully_enforced: bool,
    /// Whether commands may open TCP connections (`[sandbox] network`).
    pub network: bool,
    /// A call's processes, background ones included, end with the call: each command
    /// is PID 1 of a PID namespace of its own. `false` where the machine allows no
    /// such namespace (no `CAP_SYS_ADMIN`, user namespaces disabled): only what stays
    /// in the command's process group is killed, and a `setsid` process outlives it.
    pub pid_namespace: bool,
    /// The environment variables passed through to commands (`LC_*` for every locale
    /// variable); everything else is removed.
    pub env: Vec<String>,
}

/// The file a call would change, as it was when looked at. Kept with an approval's
/// checkpoint; equal fingerprints mean "the same file as the person was shown".
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Resource {
    /// The path as the call names it, for messages.
    pub path: String,
    /// What the file was: `sha256:<hex>` of its bytes, `absent`, or another marker the
    /// tool documents (a file too large to read, one that could not be read).
    pub fingerprint: String,
}

/// A call that asks the person something (see [`Tool::asks`]): the kind of answer and
/// what the card shows (merged into the approval's payload: `question`, `options` …).
#[derive(Clone, Debug, PartialEq)]
pub struct Ask {
    pub kind: spool_protocol::ApprovalKind,
    pub payload: serde_json::Map<String, serde_json::Value>,
}

/// What a call would change, looked at now: the resource and a preview for the card.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inspected {
    pub resource: Resource,
    /// The change against the file as it is now (a diff, or why the call would fail).
    pub preview: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolOutput {
    pub text: String,
    pub is_error: bool,
    /// The session's new todo list (the `todo_write` tool): the run stores it and
    /// publishes it as `todo_write` before the call ends. Ignored on an error.
    pub todos: Option<Vec<spool_protocol::hub::Todo>>,
    /// What the call changed in a file (`write`, `edit`): a unified diff the run keeps
    /// with the stored result, at most [`spool_protocol::RESULT_DIFF_CAP`] bytes.
    /// Ignored on an error.
    pub diff: Option<String>,
}

impl ToolOutput {
    pub fn ok(text: impl Into<String>) -> Self {
        Self { text: text.into(), is_error: false, todos: None, diff: None }
    }
    pub fn error(text: impl Into<String>) -> Self {
        Self { text: text.into(), is_error: true, todos: None, diff: None }
    }
    /// This output, keeping `diff` as what the call changed.
    pub fn with_diff(mut self, diff: String) -> Self {
        self.diff = Some(diff);
        self
    }
    /// This output, replacing the session's todo list with `todos`.
    pub fn with_todos(mut self, todos: Vec<spool_protocol::hub::Todo>) -> Self {
        self.todos = Some(todos);
        self
    }
}

impl From<String> for ToolOutput {
    fn from(text: String) -> Self {
        ToolOutput::ok(text)
    }
}

#[async_trait]
pub trait Tool: Send + Sync + 'static {
    fn spec(&self) -> ToolSpec;
    async fn call(&self, args: serde_json::Value, ctx: &ToolContext) -> ToolOutput;

    /// The argument permission patterns match: by default `path` (or `command`).
    fn main_argument(&self, args: &serde_json::Value) -> Option<String> {
        ["path", "command"].iter().find_map(|k| args.get(*k)?.as_str().map(str::to_owned))
    }

    /// What permission rules judge the call on: by default its main argument alone.
    /// A tool whose argument holds several actions (a shell command line) names each,
    /// so an allow rule must cover every one of them.
    fn subject(&self, args: &serde_json::Value) -> CallSubject {
        CallSubject::single(self.main_argument(args))
    }

    /// For a tool that runs commands: the ways "always" may allow calls like this one
    /// from now on (the exact call, the prefixes of the programs it runs), most precise
    /// first. `None` (the default): "always" allows the tool in the session.
    fn always_options(&self, _args: &serde_json::Value) -> Option<Vec<spool_protocol::AlwaysOption>> {
        None
    }

    /// One line for an approval card saying what the call will change.
    fn describe(&self, args: &serde_json::Value) -> String {
        let name = self.spec().name;
        match self.main_argument(args) {
            Some(arg) => format!("{name} {arg}"),
            None => name,
        }
    }

    /// Refuses arguments the tool can never run with, before anything is asked: the
    /// model reads the reason as the call's error. Not applied to arguments a person
    /// filled in. Default: everything passes (the call itself reports what is wrong).
    fn check(&self, _args: &serde_json::Value) -> Result<(), String> {
        Ok(())
    }

    /// For a tool that asks the person (a question): every call parks the run at an
    /// approval of this kind, whatever the rules say short of a deny, and the answer
    /// comes back as the decision's filled arguments (`{"fill": {…, "answer": …}}`).
    /// `None` (the default) for tools that act.
    fn asks(&self, _args: &serde_json::Value) -> Option<Ask> {
        None
    }

    /// Whether the model is offered this tool in a session of `mode` (and may call it).
    /// By default a tool acts (changes files, runs commands) and so is offered only in
    /// `agent` mode; a tool that changes nothing says `true` for every mode. Plan mode
    /// is the person's promise that nothing changes until they accept a plan, so a new
    /// tool is kept out of it unless it says otherwise.
    fn available_in(&self, mode: spool_protocol::SessionMode) -> bool {
        mode == spool_protocol::SessionMode::Agent
    }

    /// The mode a successful call switches its session to (`exit_plan`, once the
    /// person accepts the plan: `agent`). `None` (the default) for every other tool.
    fn mode_after(&self) -> Option<spool_protocol::SessionMode> {
        None
    }

    /// The file this call would change and a preview of the change, read now (off the
    /// async threads: it may read a whole file). `None` for tools that change no single
    /// file a decision could re-check (a shell command may touch anything).
    async fn inspect(&self, _args: &serde_json::Value, _ctx: &ToolContext) -> Option<Inspected> {
        None
    }

    /// For a tool a [`ToolSource`] offers: where it comes from and whether it may be
    /// offered in plan mode (see [`crate::tool_source`]). `None` for Spool's own tools.
    fn origin(&self) -> Option<ToolOrigin> {
        None
    }
}

/// The tools available to runs, by name: Spool's own, and the [`ToolSource`]s each
/// turn asks for more (none by default; see [`crate::tool_source`]).
#[derive(Clone, Default)]
pub struct ToolRegistry {
    pub(crate) tools: BTreeMap<String, Arc<dyn Tool>>,
    pub(crate) sources: Vec<Arc<dyn ToolSource>>,
}

impl ToolRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn with(mut self, tool: impl Tool) -> Self {
        self.tools.insert(tool.spec().name, Arc::new(tool));
        self
    }

    /// This registry, with `source` asked for more tools at every turn.
    pub fn with_source(mut self, source: Arc<dyn ToolSource>) -> Self {
        self.sources.push(source);
        self
    }

    /// The sources asked for more tools, in the order they are asked.
    pub fn sources(&self) -> &[Arc<dyn ToolSource>] {
        &self.sources
    }

    pub fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.tools.get(name).cloned()
    }

    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools.values().map(|t| t.spec()).collect()
    }

    /// The tools a session in `mode` offers the model (see [`Tool::available_in`]).
    pub fn specs_for(&self, mode: spool_protocol::SessionMode) -> Vec<ToolSpec> {
        self.tools.values().filter(|t| t.available_in(mode)).map(|t| t.spec()).collect()
    }
}

// What a source of tools besides Spool's own is (how its tools are offered and judged:
// `crate::tool_source`). Here, beside `Tool`, so the registry and the trait need nothing
// of the room that uses them.

/// The session a source is asked for tools on behalf of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolScope {
    pub session_id: SessionId,
    /// The session's project directory, canonical (where a stdio server is confined).
    pub root: PathBuf,
}

/// A provider of tools besides Spool's own, asked once per model turn.
#[async_trait]
pub trait ToolSource: Send + Sync + 'static {
    /// The source's name, for logs (an MCP server's configured name).
    fn name(&self) -> String;

    /// The tools `scope`'s next model turn is offered. A source that cannot reach its
    /// server returns what it has (or nothing) and says why in the log. The turn waits
    /// at most [`SOURCE_WAIT`](crate::tool_source::SOURCE_WAIT) for it, and not at all once the run is stopped.
    async fn tools(&self, scope: &ToolScope) -> Vec<Arc<dyn Tool>>;

    /// Whether `scope`'s session is offered this source's tools unless the session
    /// chose otherwise (an MCP server's `projects` list). Every session by default.
    fn serves(&self, _scope: &ToolScope) -> bool {
        true
    }

    /// Forgets the failures of a source that was given up on (an MCP server that
    /// failed again and again), so the next turn that needs it starts it again: the
    /// Rules panel's "Try again", after the person fixed what was wrong. `false` when it
    /// was not given up (it is working, or will be tried again by itself).
    fn retry(&self) -> bool {
        false
    }

    /// What the source is doing now, for `GET /api/mcp` and the web UI. `None` for a
    /// source with nothing to report.
    fn status(&self) -> Option<SourceStatus> {
        None
    }
}

/// A tool source's state as operators see it (`GET /api/mcp`).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct SourceStatus {
    pub name: String,
    /// How it is reached: `stdio` or `http`.
    pub transport: String,
    /// The command (stdio) or the URL (http), never a token or a header's value.
    pub target: String,
    pub state: SourceState,
    /// The tools from the most recent listing, on any session.
    pub tools: Vec<SourceTool>,
    /// How many sessions have a live connection to it.
    pub connections: usize,
}

/// Where a source stands. A stdio server is started per session, so `idle` is a
/// configured server that no session has started yet (or whose sessions closed theirs).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum SourceState {
    Idle,
    Starting,
    Ready,
    /// It failed to start, crashed, or was given up on; `retry_at_ms` is when it is
    /// tried again (`None`: not before a restart of Spool).
    Failed {
        reason: String,
        retry_at_ms: Option<i64>,
    },
}

/// One tool of a source, as listed.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct SourceTool {
    /// The name the model sees (`server_tool`).
    pub name: String,
    pub description: String,
    pub read_only: bool,
}

/// Where a source's tool comes from, as its approval card shows it, and what it claims.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolOrigin {
    /// The source's name (the MCP server).
    pub source: String,
    /// The tool's own name there (the name the model sees may be namespaced or cut).
    pub tool: String,
    /// The tool says it changes nothing (MCP's `readOnlyHint`).
    pub read_only: bool,
    /// The source's configuration trusts `read_only` (`trust_read_only`): only then is
    /// the tool offered in plan mode.
    pub trusted_read_only: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether a chunk is handed out before `at` (paused time: nothing else moves it).
    async fn chunk_by(reader: &mut ProgressReader, at: Duration) -> Option<ProgressChunk> {
        tokio::time::timeout(at, reader.next()).await.ok()
    }

    #[tokio::test(start_paused = true)]
    async fn output_is_coalesced_per_interval_or_full_chunk() {
        let (progress, mut reader) = ToolProgress::channel();
        let interval = Duration::from_millis(LIVE_OUTPUT_INTERVAL_MS);
        progress.report(b"first\n");
        // The first output goes at once: a quiet command's line shows without delay.
        assert_eq!(chunk_by(&mut reader, Duration::ZERO).await.expect("at once").text, "first\n");
        progress.report(b"a");
        progress.report(b"b");
        assert!(chunk_by(&mut reader, interval / 2).await.is_none(), "within the interval it waits");
        assert_eq!(chunk_by(&mut reader, interval).await.expect("at the interval").text, "ab");
        // A full chunk does not wait for the interval.
        progress.report(&[b'x'; LIVE_OUTPUT_CHUNK]);
        assert_eq!(chunk_by(&mut reader, Duration::ZERO).await.expect("full").text.len(), LIVE_OUTPUT_CHUNK);
    }

    #[tokio::test(start_paused = true)]
    async fn a_character_split_between_reads_waits_for_its_other_bytes() {
        let (progress, mut reader) = ToolProgress::channel();
        let e = "é".as_bytes();
        progress.report(&[b'a', e[0]]);
        assert_eq!(chunk_by(&mut reader, Duration::ZERO).await.expect("the whole part").text, "a");
        progress.report(&e[1..]);
        let late = Duration::from_millis(LIVE_OUTPUT_INTERVAL_MS * 2);
        assert_eq!(chunk_by(&mut reader, late).await.expect("the character").text, "é");
        // At the end, a cut-off character shows as U+FFFD rather than vanishing.
        progress.report(&e[..1]);
        assert_eq!(reader.rest().text, "\u{FFFD}");
    }

    #[tokio::test(start_paused = true)]
    async fn the_cap_ends_with_one_truncated_chunk_and_then_nothing() {
        let (progress, mut reader) = ToolProgress::channel();
        let mut streamed = 0;
        progress.report(&vec![b'x'; LIVE_OUTPUT_CAP - 10]);
        progress.report(&[b'y'; 100]);
        let mut last = ProgressChunk::default();
        while let Some(chunk) = chunk_by(&mut reader, Duration::from_secs(1)).await {
            assert!(!last.truncated, "a chunk after the truncated one");
            streamed += chunk.text.len();
            last = chunk;
        }
        assert!(last.truncated);
        assert_eq!(streamed, LIVE_OUTPUT_CAP);
        progress.report(b"more");
        assert!(chunk_by(&mut reader, Duration::from_secs(1)).await.is_none());
        assert_eq!(reader.rest(), ProgressChunk::default());
    }

    #[test]
    fn reporting_without_a_reader_does_nothing() {
        ToolProgress::default().report(b"nobody listens");
    }
}
