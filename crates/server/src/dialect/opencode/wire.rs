//! OpenCode's JSON shapes, as `@opencode-ai/sdk` declares them (`dist/gen/types.gen.d.ts`
//! for the root client, `dist/v2/gen/types.gen.d.ts` for `/v2`).
//!
//! Where the two generations of the SDK disagree, Spool sends the union of both, so one
//! answer parses in either client: a permission carries v1's `type`/`pattern`/`title`
//! *and* v2's `permission`/`patterns`/`always`; `permission.replied` names the approval
//! both as `permissionID` and `requestID` and the answer both as `response` and `reply`;
//! every event has v2's `id`. Optional fields are left out when Spool has nothing to say,
//! never sent as `null`, because the SDK's types say "absent", not "nullable".
//!
//! The OpenAPI document names these schemas `opencode.*` (`opencode.SessionInfo`, …),
//! apart from Spool's own types of the same names.

use serde::Serialize;
use serde_json::Value;
use spool_protocol::time::Millis;
use utoipa::ToSchema;

/// The provider every Spool model is reported under.
pub const PROVIDER: &str = "spool";
/// The agent (and mode) every Spool message is reported under: Spool has one agent.
pub const AGENT: &str = "build";

/// A session (`Session` in both SDKs).
#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
#[schema(as = opencode::SessionInfo)]
pub struct SessionInfo {
    pub id: String,
    /// v2 requires a slug; Spool has none, so the id serves.
    pub slug: String,
    #[serde(rename = "projectID")]
    pub project_id: String,
    pub directory: String,
    pub title: String,
    pub version: &'static str,
    pub time: SessionTime,
    /// v2's permission ruleset: the session's own rules (the server's come first).
    pub permission: Vec<Rule>,
    /// The pending revert (`POST /session/:id/revert`), until `unrevert` or the next
    /// prompt; absent otherwise, as OpenCode leaves it out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revert: Option<SessionRevert>,
}

/// A session's pending revert (`Session.revert` in both SDKs).
#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
#[schema(as = opencode::SessionRevert)]
pub struct SessionRevert {
    /// The user message the revert starts at: it and every later message left the history.
    #[serde(rename = "messageID")]
    pub message_id: String,
    /// Spool reverts whole turns, so never a part; kept for OpenCode's shape.
    #[serde(rename = "partID", skip_serializing_if = "Option::is_none")]
    pub part_id: Option<String>,
    /// The snapshot of the files taken just before the revert, which `unrevert` puts back.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<String>,
    /// What the revert changed in the files, as a unified diff.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
#[schema(as = opencode::SessionTime)]
pub struct SessionTime {
    pub created: Millis,
    pub updated: Millis,
    /// Spool keeps only an archived flag; an archived session reports its last update.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub archived: Option<Millis>,
}

/// One permission rule in OpenCode's words (`PermissionRule` in v2).
#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
#[schema(as = opencode::Rule)]
pub struct Rule {
    pub permission: String,
    pub pattern: String,
    pub action: spool_protocol::PermissionAction,
}

/// `SessionStatus`: what `GET /session/status` and `session.status` report.
#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
#[schema(as = opencode::Status)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Status {
    Idle,
    Busy,
    /// The model provider failed and the call is retried at `next` (ms).
    Retry {
        attempt: u32,
        message: String,
        next: Millis,
    },
}

/// A message's metadata (`Message` = `UserMessage | AssistantMessage`).
#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
#[schema(as = opencode::MessageInfo)]
#[serde(tag = "role", rename_all = "lowercase")]
pub enum MessageInfo {
    User(UserInfo),
    Assistant(Box<AssistantInfo>),
}

#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
#[schema(as = opencode::UserInfo)]
pub struct UserInfo {
    pub id: String,
    #[serde(rename = "sessionID")]
    pub session_id: String,
    pub time: UserTime,
    pub agent: &'static str,
    pub model: ModelRef,
}

#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
#[schema(as = opencode::UserTime)]
pub struct UserTime {
    pub created: Millis,
}

#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
#[schema(as = opencode::ModelRef)]
pub struct ModelRef {
    #[serde(rename = "providerID")]
    pub provider_id: &'static str,
    #[serde(rename = "modelID")]
    pub model_id: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
#[schema(as = opencode::AssistantInfo)]
pub struct AssistantInfo {
    pub id: String,
    #[serde(rename = "sessionID")]
    pub session_id: String,
    pub time: AssistantTime,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorInfo>,
    /// The user message this answers.
    #[serde(rename = "parentID")]
    pub parent_id: String,
    #[serde(rename = "modelID")]
    pub model_id: String,
    #[serde(rename = "providerID")]
    pub provider_id: &'static str,
    pub mode: &'static str,
    pub agent: &'static str,
    pub path: MessagePath,
    pub cost: f64,
    pub tokens: Tokens,
    /// `stop`, `tool-calls` or `length`, once the step finished normally.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finish: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
#[schema(as = opencode::AssistantTime)]
pub struct AssistantTime {
    pub created: Millis,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completed: Option<Millis>,
}

#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
#[schema(as = opencode::MessagePath)]
pub struct MessagePath {
    pub cwd: String,
    pub root: String,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, ToSchema)]
#[schema(as = opencode::Tokens)]
pub struct Tokens {
    /// Every token the step read and wrote: input, output (reasoning is counted in it)
    /// and the cache's reads and writes. Seed 004 shows this as `prompt.total`; the SDK's
    /// `StepFinishPart` has no `prompt`, its `tokens.total` says it.
    pub total: u64,
    pub input: u64,
    pub output: u64,
    pub reasoning: u64,
    pub cache: Cache,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, ToSchema)]
#[schema(as = opencode::Cache)]
pub struct Cache {
    pub read: u64,
    pub write: u64,
}

impl From<spool_protocol::Usage> for Tokens {
    fn from(u: spool_protocol::Usage) -> Self {
        Tokens {
            total: u.input + u.output + u.cache_read + u.cache_write,
            input: u.input,
            output: u.output,
            reasoning: u.reasoning,
            cache: Cache { read: u.cache_read, write: u.cache_write },
        }
    }
}

/// OpenCode's named errors (`MessageAbortedError`, `APIError`, `UnknownError`).
#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
#[schema(as = opencode::ErrorInfo)]
pub struct ErrorInfo {
    pub name: &'static str,
    pub data: ErrorData,
}

#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
#[schema(as = opencode::ErrorData)]
pub struct ErrorData {
    pub message: String,
    /// Required by `APIError`, absent from the others.
    #[serde(rename = "isRetryable", skip_serializing_if = "Option::is_none")]
    pub is_retryable: Option<bool>,
}

impl ErrorInfo {
    pub fn aborted(message: impl Into<String>) -> Self {
        ErrorInfo { name: "MessageAbortedError", data: ErrorData { message: message.into(), is_retryable: None } }
    }

    /// The model provider failed.
    pub fn api(message: impl Into<String>) -> Self {
        ErrorInfo { name: "APIError", data: ErrorData { message: message.into(), is_retryable: Some(false) } }
    }

    pub fn unknown(message: impl Into<String>) -> Self {
        ErrorInfo { name: "UnknownError", data: ErrorData { message: message.into(), is_retryable: None } }
    }
}

/// One part of a message.
#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
#[schema(as = opencode::Part)]
pub struct Part {
    pub id: String,
    #[serde(rename = "sessionID")]
    pub session_id: String,
    #[serde(rename = "messageID")]
    pub message_id: String,
    #[serde(flatten)]
    pub kind: PartKind,
}

#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
#[schema(as = opencode::PartKind)]
#[serde(tag = "type")]
pub enum PartKind {
    /// `snapshot`: the tree of the project's files (in Spool's shadow repository, see
    /// `engine/src/snapshots.rs`) taken before the step's first call that may change
    /// files, as OpenCode's names its own snapshot. Absent, as OpenCode leaves it out,
    /// for a step without such calls. Live, it arrives after the part was first sent
    /// (the snapshot is taken once the model asked for the calls): the part is sent again.
    #[serde(rename = "step-start")]
    StepStart {
        #[serde(skip_serializing_if = "Option::is_none")]
        snapshot: Option<String>,
    },
    #[serde(rename = "text")]
    Text {
        text: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        time: Option<PartTime>,
    },
    #[serde(rename = "reasoning")]
    Reasoning { text: String, time: PartTime },
    /// A file the user sent with the message (`FilePart`): `url` is Spool's
    /// `/api/attachments/{id}`, relative to the server the client talks to, fetched with
    /// the same credentials as the rest of the API (see `records::user_parts`).
    #[serde(rename = "file")]
    File { mime: String, filename: String, url: String },
    #[serde(rename = "tool")]
    Tool {
        #[serde(rename = "callID")]
        call_id: String,
        tool: String,
        state: ToolState,
    },
    /// `snapshot`: the tree after the step's last call, when its `step-start` has one
    /// and the calls all finished.
    #[serde(rename = "step-finish")]
    StepFinish {
        reason: String,
        cost: f64,
        tokens: Tokens,
        #[serde(skip_serializing_if = "Option::is_none")]
        snapshot: Option<String>,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize, ToSchema)]
#[schema(as = opencode::PartTime)]
pub struct PartTime {
    pub start: Millis,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end: Option<Millis>,
}

/// A tool part's life: `pending → running → completed | error`.
#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
#[schema(as = opencode::ToolState)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum ToolState {
    /// Asked for by the model, not started (perhaps waiting for a permission).
    Pending {
        input: Value,
        raw: String,
    },
    Running {
        input: Value,
        time: StartTime,
        /// What OpenCode's own bash tool puts here while it runs: `{"output": …}`, the
        /// output so far (see the mapper's `LIVE_METADATA_CHARS`). Absent before any.
        #[serde(skip_serializing_if = "Option::is_none")]
        metadata: Option<Value>,
    },
    Completed {
        input: Value,
        output: String,
        title: String,
        metadata: Value,
        time: SpanTime,
    },
    Error {
        input: Value,
        error: String,
        time: SpanTime,
    },
}

impl ToolState {
    /// A call that ran: `error` with its result as the error, else `completed` with it as
    /// the output (the tool's name as the title, no metadata).
    pub fn settled(input: Value, result: String, is_error: bool, tool: String, time: SpanTime) -> Self {
        match is_error {
            true => ToolState::Error { input, error: result, time },
            false => ToolState::Completed { input, output: result, title: tool, metadata: serde_json::json!({}), time },
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize, ToSchema)]
#[schema(as = opencode::StartTime)]
pub struct StartTime {
    pub start: Millis,
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize, ToSchema)]
#[schema(as = opencode::SpanTime)]
pub struct SpanTime {
    pub start: Millis,
    pub end: Millis,
}

/// A message with its parts, as `GET /session/:id/message` lists them.
#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
#[schema(as = opencode::MessageWithParts)]
pub struct MessageWithParts {
    pub info: MessageInfo,
    pub parts: Vec<Part>,
}

/// A pending permission: v2's `PermissionRequest` and v1's `Permission` in one object.
#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
#[schema(as = opencode::Permission)]
pub struct Permission {
    pub id: String,
    #[serde(rename = "sessionID")]
    pub session_id: String,
    /// v2: the tool that asks.
    pub permission: String,
    /// v2: what it would act on (the path or command), `*` when it names nothing.
    pub patterns: Vec<String>,
    /// The redacted approval payload: tool, argument, change, reason.
    pub metadata: Value,
    /// v2: the patterns an `always` answer allows from now on: for a command the exact
    /// command, for another tool `*` (the tool).
    pub always: Vec<String>,
    /// v2: the tool call asking.
    pub tool: ToolRef,
    /// v1: the tool.
    #[serde(rename = "type")]
    pub kind: String,
    /// v1: what it would act on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    #[serde(rename = "messageID")]
    pub message_id: String,
    #[serde(rename = "callID")]
    pub call_id: String,
    /// v1: one line for a person.
    pub title: String,
    pub time: UserTime,
}

#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
#[schema(as = opencode::ToolRef)]
pub struct ToolRef {
    #[serde(rename = "messageID")]
    pub message_id: String,
    #[serde(rename = "callID")]
    pub call_id: String,
}

/// A question the agent asks (`QuestionRequest` in v2): what `question.asked` carries and
/// `GET /question` lists. Spool's `question` tool asks one question at a time.
#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
#[schema(as = opencode::QuestionRequest)]
pub struct QuestionRequest {
    /// The approval's id: what `POST /question/:id/reply` names.
    pub id: String,
    #[serde(rename = "sessionID")]
    pub session_id: String,
    pub questions: Vec<QuestionInfo>,
    /// The tool call asking.
    pub tool: ToolRef,
}

/// One question (`QuestionInfo`).
#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
#[schema(as = opencode::QuestionInfo)]
pub struct QuestionInfo {
    pub question: String,
    /// A short label: the tool's name (OpenCode's models write one; Spool's do not), or
    /// the asking server's for a server's question.
    pub header: String,
    /// Empty when the question asks for words of the person's own.
    pub options: Vec<QuestionOption>,
    /// One answer per question, except a server's field that takes several choices.
    pub multiple: bool,
    /// Always true: an answer of the person's own is always allowed.
    pub custom: bool,
}

/// One option of a question (`QuestionOption`); `description` is empty when the model
/// gave none (the SDK requires one).
#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
#[schema(as = opencode::QuestionOption)]
pub struct QuestionOption {
    pub label: String,
    pub description: String,
}

/// An answer to a permission, in OpenCode's words.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize, ToSchema)]
#[schema(as = opencode::Reply)]
#[serde(rename_all = "lowercase")]
pub enum Reply {
    Once,
    Always,
    Reject,
}

impl Reply {
    pub fn decision(self) -> spool_protocol::Decision {
        match self {
            Reply::Once => spool_protocol::Decision::Once,
            Reply::Always => spool_protocol::Decision::Always,
            Reply::Reject => spool_protocol::Decision::Reject,
        }
    }

    /// How a resolution Spool records reads in OpenCode: an approval that expired or
    /// was cancelled with its run was, in effect, rejected; `fill` ran the call once.
    pub fn from_resolution(decision: &str) -> Reply {
        match decision {
            "once" | "fill" => Reply::Once,
            "always" => Reply::Always,
            _ => Reply::Reject,
        }
    }
}

/// A todo item (`Todo` in both SDKs; v2 has no `id`, v1 requires it).
#[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
#[schema(as = opencode::Todo)]
pub struct Todo {
    pub content: String,
    /// `pending`, `in_progress`, `completed` or `cancelled`.
    pub status: &'static str,
    /// `high`, `medium` or `low`; `medium` for an item the agent gave none (both SDKs
    /// require one).
    pub priority: &'static str,
    pub id: String,
}

impl Todo {
    /// The item at `position` of a session's list (its position names an item that
    /// came without an id, which Spool's own tool never leaves out).
    pub fn from_todo(position: usize, todo: &spool_protocol::hub::Todo) -> Self {
        Todo {
            content: todo.content.clone(),
            status: todo.status.as_str(),
            priority: todo.priority.map_or("medium", |p| p.as_str()),
            id: todo.id.clone().unwrap_or_else(|| (position + 1).to_string()),
        }
    }
}

/// One changed file in `session.diff`: the union of v1's `FileDiff` (`before`/`after`
/// are whole file contents there, which Spool does not send: they are empty) and v2's
/// `SnapshotFileDiff` (`status`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FileDiff {
    pub file: String,
    pub before: String,
    pub after: String,
    pub additions: u64,
    pub deletions: u64,
    /// `added`, `deleted` or `modified`.
    pub status: &'static str,
}

impl FileDiff {
    pub fn from_change(change: &spool_protocol::git::FileChange) -> Self {
        FileDiff {
            file: change.path.clone(),
            before: String::new(),
            after: String::new(),
            additions: change.additions,
            deletions: change.deletions,
            status: change.status.as_str(),
        }
    }
}

/// Everything `GET /event` sends: `data: {"id", "type", "properties"}` per event.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "type", content = "properties")]
pub enum Event {
    #[serde(rename = "server.connected")]
    ServerConnected {},
    #[serde(rename = "server.heartbeat")]
    ServerHeartbeat {},
    #[serde(rename = "session.created")]
    SessionCreated {
        #[serde(rename = "sessionID")]
        session_id: String,
        info: SessionInfo,
    },
    #[serde(rename = "session.updated")]
    SessionUpdated {
        #[serde(rename = "sessionID")]
        session_id: String,
        info: SessionInfo,
    },
    #[serde(rename = "session.deleted")]
    SessionDeleted {
        #[serde(rename = "sessionID")]
        session_id: String,
        info: SessionInfo,
    },
    #[serde(rename = "session.status")]
    SessionStatus {
        #[serde(rename = "sessionID")]
        session_id: String,
        status: Status,
    },
    #[serde(rename = "session.idle")]
    SessionIdle {
        #[serde(rename = "sessionID")]
        session_id: String,
    },
    #[serde(rename = "session.compacted")]
    SessionCompacted {
        #[serde(rename = "sessionID")]
        session_id: String,
    },
    #[serde(rename = "session.error")]
    SessionError {
        #[serde(rename = "sessionID")]
        session_id: String,
        error: ErrorInfo,
    },
    #[serde(rename = "message.updated")]
    MessageUpdated {
        #[serde(rename = "sessionID")]
        session_id: String,
        info: MessageInfo,
    },
    /// A part's whole current state. With `delta` (legacy mode only), seed 004's
    /// per-token form: `part.text` is the text so far and `delta` what this event added.
    #[serde(rename = "message.part.updated")]
    PartUpdated {
        #[serde(rename = "sessionID")]
        session_id: String,
        part: Part,
        time: Millis,
        #[serde(skip_serializing_if = "Option::is_none")]
        delta: Option<String>,
    },
    /// Text appended to one field of a part: the linear way to stream tokens.
    #[serde(rename = "message.part.delta")]
    PartDelta {
        #[serde(rename = "sessionID")]
        session_id: String,
        #[serde(rename = "messageID")]
        message_id: String,
        #[serde(rename = "partID")]
        part_id: String,
        field: &'static str,
        delta: String,
    },
    /// v1's name for a new permission.
    #[serde(rename = "permission.updated")]
    PermissionUpdated(Permission),
    /// v2's name for a new permission.
    #[serde(rename = "permission.asked")]
    PermissionAsked(Permission),
    /// The session's whole todo list, after the agent changed it.
    #[serde(rename = "todo.updated")]
    TodoUpdated {
        #[serde(rename = "sessionID")]
        session_id: String,
        todos: Vec<Todo>,
    },
    /// The project's changed files against HEAD, after the git poller saw them change.
    #[serde(rename = "session.diff")]
    SessionDiff {
        #[serde(rename = "sessionID")]
        session_id: String,
        diff: Vec<FileDiff>,
    },
    /// Who is on the session changed (Spool's own event, not OpenCode's: a client that
    /// does not know it skips it): its views on every node, those that can answer
    /// permissions, the visible ones among them, by kind of client.
    #[serde(rename = "spool.presence")]
    SpoolPresence {
        #[serde(rename = "sessionID")]
        session_id: String,
        #[serde(flatten)]
        presence: spool_protocol::Presence,
    },
    /// The agent asks the person (the `question` tool), instead of a permission.
    #[serde(rename = "question.asked")]
    QuestionAsked(QuestionRequest),
    /// The person answered: one list of chosen labels (or their own words) per question.
    #[serde(rename = "question.replied")]
    QuestionReplied {
        #[serde(rename = "sessionID")]
        session_id: String,
        #[serde(rename = "requestID")]
        request_id: String,
        answers: Vec<Vec<String>>,
    },
    /// The person dismissed the question (or it ended unanswered with its run).
    #[serde(rename = "question.rejected")]
    QuestionRejected {
        #[serde(rename = "sessionID")]
        session_id: String,
        #[serde(rename = "requestID")]
        request_id: String,
    },
    #[serde(rename = "permission.replied")]
    PermissionReplied {
        #[serde(rename = "sessionID")]
        session_id: String,
        #[serde(rename = "permissionID")]
        permission_id: String,
        #[serde(rename = "requestID")]
        request_id: String,
        response: Reply,
        reply: Reply,
    },
}

/// An event with the `id` v2 requires: the plain serialization the shared bodies are
/// tested against.
#[cfg(test)]
#[derive(Serialize)]
pub struct Envelope<'a> {
    pub id: &'a str,
    #[serde(flatten)]
    pub event: &'a Event,
}

impl Event {
    /// The event's JSON without its opening brace: what every connection shares, each
    /// putting its own `{"id":…,` in front (see [`sse_with_id`]).
    pub fn shared_body(&self) -> bytes::Bytes {
        let json = serde_json::to_vec(self).expect("OpenCode events are plain data");
        bytes::Bytes::from(json).slice(1..)
    }

    /// The SSE bytes of this event: one `data:` line, no `event:` field (seed 004:
    /// the type is in the JSON), no SSE `id` (there is nothing to resume from).
    #[cfg(test)]
    pub fn to_sse(&self, id: &str) -> bytes::Bytes {
        let json = serde_json::to_string(&Envelope { id, event: self }).expect("OpenCode events are plain data");
        spool_protocol::sse::encode(None, None, &json)
    }
}

/// The SSE bytes of an event from its shared body ([`Event::shared_body`]) and this
/// connection's id: the same bytes as [`Event::to_sse`], without serializing again. The
/// id is written as it is: ids are made here of `[0-9A-Za-z_]` and need no escaping.
pub fn sse_with_id(buf: &mut bytes::BytesMut, id: std::fmt::Arguments<'_>, body: &[u8]) {
    use std::fmt::Write as _;
    buf.extend_from_slice(b"data: {\"id\":\"");
    // Writing into a BytesMut cannot fail.
    let _ = buf.write_fmt(id);
    buf.extend_from_slice(b"\",");
    buf.extend_from_slice(body);
    buf.extend_from_slice(b"\n\n");
}

/// The SSE bytes of a `/global/event` event: OpenCode's `GlobalEvent`, `{directory,
/// payload}`, around the event's shared body and this connection's id.
pub fn sse_global(buf: &mut bytes::BytesMut, directory: &str, id: std::fmt::Arguments<'_>, body: &[u8]) {
    use std::fmt::Write as _;
    buf.extend_from_slice(b"data: {\"directory\":");
    buf.extend_from_slice(&serde_json::to_vec(directory).expect("a string is plain data"));
    buf.extend_from_slice(b",\"payload\":{\"id\":\"");
    // Writing into a BytesMut cannot fail.
    let _ = buf.write_fmt(id);
    buf.extend_from_slice(b"\",");
    buf.extend_from_slice(body);
    buf.extend_from_slice(b"}\n\n");
}
