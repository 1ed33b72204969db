//! The REST API's bodies, defined once: the requests a client sends, the records the
//! server answers with, and the error body `{"error": {"code", "message"}}`. The server
//! reads and writes these types (its OpenAPI document describes them from the same
//! definitions), the engine stores error bodies verbatim for idempotent replays, and
//! clients such as `spool-client` deserialize the answers into them.

use crate::approval::Decision;
use crate::domain::{Session, SessionStatus};
use crate::frame::{QueuedMessage, SessionState};
use crate::ids::{ApprovalId, MessageId, RunId, StreamId};
use crate::message::IndexedMessage;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use utoipa::ToSchema;

/// What every error response of the API carries.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody<'a> {
    pub error: ErrorDetail<'a>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ErrorDetail<'a> {
    /// A stable machine-readable code (`not_found`, `invalid_body`, `session_busy`, …).
    #[schema(value_type = String)]
    pub code: Cow<'a, str>,
    /// A sentence for a person.
    #[schema(value_type = String)]
    pub message: Cow<'a, str>,
    /// With `resource_changed`: the new approval that asks for the same call against the
    /// file as it is now (the `interruptId` to resume with).
    #[serde(rename = "approvalId", default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub approval_id: Option<Cow<'a, str>>,
}

/// The JSON text of an error response.
pub fn error_body(code: &str, message: &str) -> String {
    let error = ErrorDetail { code: code.into(), message: message.into(), approval_id: None };
    serde_json::to_string(&ErrorBody { error }).expect("two strings always serialize")
}

/// The JSON text of a `resource_changed` answer, naming the approval that replaced the
/// one decided.
pub fn resource_changed_body(message: &str, approval_id: &str) -> String {
    let error =
        ErrorDetail { code: "resource_changed".into(), message: message.into(), approval_id: Some(approval_id.into()) };
    serde_json::to_string(&ErrorBody { error }).expect("strings always serialize")
}

/// `POST /api/projects`: registers a directory.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct CreateProject {
    /// An existing directory; stored as its canonical absolute path. A leading `~` or
    /// `~/` is the server's home directory.
    pub path: String,
    /// Defaults to the directory's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// `POST /api/sessions`: starts a session in a project.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreateSession {
    /// A `prj_…` id; one that names no project of the caller is a 404.
    pub project_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
}

/// A session as lists show it.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionInfo {
    #[serde(flatten)]
    pub session: Session,
    pub status: SessionStatus,
    /// An approval or question waits for a person: a run is parked at it (absent from
    /// older servers, hence the default).
    #[serde(default)]
    pub waiting: bool,
}

/// `GET /api/sessions/:id`: the session plus the state a snapshot carries, and the
/// cursor that state corresponds to.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionDetail {
    #[serde(flatten)]
    pub session: Session,
    pub status: SessionStatus,
    pub state: SessionState,
    pub stream_id: StreamId,
    pub seq: u64,
    /// The project's git state as the git poller last read it; `null` before its first
    /// reading of this session, for a project in no git repository, and with polling off.
    pub git: Option<crate::git::GitState>,
}

/// A page of history.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct MessagePage {
    pub messages: Vec<IndexedMessage>,
    pub total: u64,
}

/// `POST /api/sessions/:id/prompt`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PromptBody {
    /// The prompt's text; may be empty (`""`) when `parts` carries a file.
    pub text: String,
    /// Files sent with the prompt, and more text (see README, "Attachments"): the
    /// message holds the files first, then `text`, then the parts' text.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<PromptPart>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// `wait` or `deny`: what an approval does with no interactive view connected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_policy: Option<ApprovalPolicy>,
    /// `continue` (default) or `cancel`: what the run does when its last listener leaves.
    #[serde(default)]
    pub on_disconnect: OnDisconnect,
    /// While a run is going, wait in the session's queue (answered `{queued: true, …}`)
    /// instead of 409 `session_busy`: the older spelling of `multitask: "enqueue"`.
    #[serde(default)]
    pub queue: bool,
    /// What this prompt does while a run is going (see [`Multitask`]); `reject` when
    /// left out. With `queue: true` it must be `enqueue`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub multitask: Option<Multitask>,
    /// Edits the turn at this user message index: the turns from there on leave the
    /// active path as a branch (`GET /api/sessions/:id/branches`) and this prompt takes
    /// their place. 409 `session_busy` while a run is going or parked or prompts are
    /// queued; not with `queue`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<u64>,
    /// With `at`: answer that turn again (an empty `text` asks its own prompt again);
    /// the shelved turns are a branch of kind `regenerate`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub regenerate: bool,
    /// Tools that run in the client: offered to the model beside Spool's own; a call
    /// of one parks the run until `POST /api/tool-calls/{approvalId}/result` (see
    /// README, "Client-side tools"). At most 32; not with `queue`/`enqueue`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ClientTool>,
}

/// One part of a prompt beside its `text`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum PromptPart {
    Text { text: String },
    /// A file: an upload's `id` (`POST /api/uploads`), or the bytes inline as a
    /// `data:` URL (base64, bounded by `[limits] inline_file_bytes`). A URL of Spool's
    /// own (`/api/attachments/att_…`) names that attachment; Spool fetches no other URL.
    #[serde(rename_all = "camelCase")]
    File {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        url: Option<String>,
        /// The name to keep with an inline file (sanitized); an upload keeps its own.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        /// The sender's claim; the bytes are sniffed all the same.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        media_type: Option<String>,
    },
}

/// `POST /api/uploads`'s answer: a stored file, owned by the caller, to send in a
/// prompt's `parts` by `id`; `url` fetches its bytes with the owner's credentials.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AttachmentInfo {
    #[schema(value_type = String)]
    pub id: crate::ids::AttachmentId,
    pub name: String,
    /// What the bytes are, as sniffed (`image/png`, `application/pdf`, `text/plain`, …).
    pub media_type: String,
    pub size: u64,
    pub sha256: String,
    pub url: String,
}

impl From<AttachmentInfo> for crate::Content {
    /// The file as a block of the user message that sends it.
    fn from(file: AttachmentInfo) -> Self {
        let AttachmentInfo { id, name, media_type, size, sha256, url } = file;
        crate::Content::File { id, name, media_type, size, sha256, url }
    }
}

/// A tool the client runs itself, declared with a prompt (AG-UI's `Tool` shape).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClientTool {
    /// `^[A-Za-z0-9_-]{1,64}$`, unique in the prompt, not one of Spool's tools.
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// A JSON Schema of the arguments (`{"type": "object", …}`); absent: no arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub parameters: Option<serde_json::Value>,
}

impl PromptBody {
    /// The strategy the body asks for, from `multitask` and its older spelling `queue`;
    /// `None` when the two disagree (`queue: true` with anything but `enqueue`).
    pub fn strategy(&self) -> Option<Multitask> {
        match (self.multitask, self.queue) {
            (None, queue) => Some(if queue { Multitask::Enqueue } else { Multitask::Reject }),
            (Some(Multitask::Enqueue), _) => Some(Multitask::Enqueue),
            (Some(other), false) => Some(other),
            (Some(_), true) => None,
        }
    }
}

/// What a prompt does when its session already has a run going ("double-texting").
/// A prompt to an idle session starts at once whatever it says.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub enum Multitask {
    /// 409 `session_busy`; nothing changes.
    #[default]
    Reject,
    /// Waits in the session's queue and runs once the runs before it have settled.
    Enqueue,
    /// The going run is cancelled and keeps what it did (its messages stay on the
    /// path); this prompt starts after them, ahead of any queued prompt.
    Interrupt,
    /// The going run is cancelled and its turn leaves the path (a branch of kind
    /// `rollback` keeps it); this prompt takes the turn's place, ahead of any queued
    /// prompt.
    Rollback,
}

/// A started run, or (with `queue: true` while a run is going) the queued message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum PromptAnswer {
    /// Listed first so a client tries it first: a queued answer has no `runId`.
    Started(PromptAccepted),
    Queued(PromptQueued),
}

/// A prompt's acceptance: the run it started, or the run its requestId already named.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PromptAccepted {
    pub request_id: String,
    pub run_id: RunId,
    /// False when the requestId was seen before and nothing new started.
    #[serde(skip)]
    pub created: bool,
}

/// A prompt's place in the queue: the answer to a queued prompt.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PromptQueued {
    /// Always `true`: tells this answer from a started run's `{requestId, runId}`.
    pub queued: bool,
    pub request_id: String,
    /// The queued message: what `DELETE /api/messages/{id}` removes, and the id its user
    /// message keeps once a run takes it.
    pub message_id: MessageId,
    /// 1 for the next prompt to run.
    pub position: usize,
}

impl PromptQueued {
    /// The answer for `message`, at `index` (from 0) in its session's queue.
    pub fn at(message: &QueuedMessage, index: usize) -> Self {
        Self {
            queued: true,
            request_id: message.request_id.clone(),
            message_id: message.id.clone(),
            position: index + 1,
        }
    }
}

/// `POST /api/sessions/:id/abort`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Aborted {
    pub aborted: bool,
    pub run_id: Option<RunId>,
}

/// `POST /api/sessions/:id/approvals/:approval`.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DecideBody {
    /// `once`, `always`, `reject` or `{"fill": {…}}`.
    pub decision: Decision,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// With `always` on a command: the pattern of the option the person chose from the
    /// approval's `payload.alwaysOptions` (one whose `patterns` is this one pattern).
    /// Without it (and without `patterns`), `always` allows this exact command only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    /// With `always` on a command: the `patterns` of the option the person chose, in
    /// any order (an option for a command line that runs several programs has one
    /// pattern each). Anything not offered is refused with 400 `pattern_not_offered`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patterns: Option<Vec<String>>,
}

impl DecideBody {
    /// The patterns the body names, from `pattern` or `patterns` (not both).
    pub fn chosen_patterns(&self) -> Result<Option<Vec<String>>, String> {
        match (&self.pattern, &self.patterns) {
            (Some(_), Some(_)) => Err("give either pattern or patterns, not both".into()),
            (Some(one), None) => Ok(Some(vec![one.clone()])),
            (None, several) => Ok(several.clone()),
        }
    }
}

/// The answer to a decision that was applied.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Decided {
    pub approval_id: ApprovalId,
    pub run_id: RunId,
    pub decision: Decision,
    /// Always `resolved`.
    #[schema(pattern = "^resolved$")]
    pub status: String,
}

/// What an approval does when no interactive view (`?approvals=1`) is connected.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ApprovalPolicy {
    /// It stays pending, durably, until someone decides (or it expires).
    #[default]
    Wait,
    /// Fail closed: the tool call is denied at once and the run goes on.
    Deny,
}

impl ApprovalPolicy {
    /// The word stored (and sent) for it.
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalPolicy::Wait => "wait",
            ApprovalPolicy::Deny => "deny",
        }
    }

    pub fn parse(word: &str) -> Option<Self> {
        [ApprovalPolicy::Wait, ApprovalPolicy::Deny].into_iter().find(|p| p.as_str() == word)
    }
}

/// What happens to a run when its last listener leaves (seed 003's disconnect policy).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum OnDisconnect {
    /// The run goes on; its results are stored for the next visit.
    #[default]
    Continue,
    /// The run is cancelled when its last subscriber disconnects.
    Cancel,
}

impl OnDisconnect {
    /// The word stored (and sent) for it.
    pub fn as_str(self) -> &'static str {
        match self {
            OnDisconnect::Continue => "continue",
            OnDisconnect::Cancel => "cancel",
        }
    }

    pub fn parse(word: &str) -> Option<Self> {
        [OnDisconnect::Continue, OnDisconnect::Cancel].into_iter().find(|p| p.as_str() == word)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompt_answers_read_back_as_what_they_are() {
        let started: PromptAnswer =
            serde_json::from_str(r#"{"requestId":"r","runId":"run_01hzy3k8v0q9w7x5c2b4n6m8p0"}"#)
                .expect("a started run");
        assert!(matches!(started, PromptAnswer::Started(ref a) if a.request_id == "r"));
        let queued: PromptAnswer = serde_json::from_str(
            r#"{"queued":true,"requestId":"r","messageId":"msg_01hzy3k8v0q9w7x5c2b4n6m8p0","position":2}"#,
        )
        .expect("a queued prompt");
        assert!(matches!(queued, PromptAnswer::Queued(ref q) if q.position == 2));
    }

    #[test]
    fn a_prompt_strategy_comes_from_multitask_or_queue_and_the_two_must_agree() {
        let strategy = |json: &str| serde_json::from_str::<PromptBody>(json).expect("a prompt body").strategy();
        assert_eq!(strategy(r#"{"text":"t"}"#), Some(Multitask::Reject));
        assert_eq!(strategy(r#"{"text":"t","queue":true}"#), Some(Multitask::Enqueue));
        assert_eq!(strategy(r#"{"text":"t","multitask":"interrupt"}"#), Some(Multitask::Interrupt));
        assert_eq!(strategy(r#"{"text":"t","multitask":"rollback","queue":false}"#), Some(Multitask::Rollback));
        assert_eq!(strategy(r#"{"text":"t","multitask":"enqueue","queue":true}"#), Some(Multitask::Enqueue));
        assert_eq!(strategy(r#"{"text":"t","multitask":"reject","queue":true}"#), None);
        assert!(serde_json::from_str::<PromptBody>(r#"{"text":"t","multitask":"later"}"#).is_err());
    }

    #[test]
    fn error_bodies_read_back() {
        let body: ErrorBody = serde_json::from_str(&resource_changed_body("it \"changed\"", "per_1")).expect("json");
        assert_eq!(body.error.code, "resource_changed");
        assert_eq!(body.error.message, "it \"changed\"");
        assert_eq!(body.error.approval_id.as_deref(), Some("per_1"));
    }
}
