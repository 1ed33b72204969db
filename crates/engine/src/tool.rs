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
use spool_protocol::CallSubject;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// What a tool call may touch and how it is stopped.
#[derive(Clone, Debug)]
pub struct ToolContext {
    /// The project directory, canonical. Tools act only inside it.
    pub root: PathBuf,
    /// Cancelled when the run is aborted; long tools must stop promptly.
    pub cancel: CancellationToken,
    /// Spool's data directory, canonical: no tool path may resolve into it and no walk
    /// descends into it, even if it lies under `root` (a project registered before
    /// that was refused).
    pub data_dir: Option<PathBuf>,
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
}

impl ToolOutput {
    pub fn ok(text: impl Into<String>) -> Self {
        Self { text: text.into(), is_error: false, todos: None }
    }
    pub fn error(text: impl Into<String>) -> Self {
        Self { text: text.into(), is_error: true, todos: None }
    }
    /// This output, replacing the session's todo list with `todos`.
    pub fn with_todos(mut self, todos: Vec<spool_protocol::hub::Todo>) -> Self {
        self.todos = Some(todos);
        self
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
}

/// The tools available to runs, by name.
#[derive(Clone, Default)]
pub struct ToolRegistry {
    tools: BTreeMap<String, Arc<dyn Tool>>,
}

impl ToolRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn with(mut self, tool: impl Tool) -> Self {
        self.tools.insert(tool.spec().name, Arc::new(tool));
        self
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
