//! The Vercel AI SDK's chat endpoint: `POST /api/ai-sdk/chat` takes what the `ai`
//! package's `DefaultChatTransport` sends and answers with its UI message stream;
//! `GET /api/ai-sdk/chat/:id/stream` is the transport's `reconnectToStream`. The mapping
//! from native frames is `dialect::ai_sdk`; this file only feeds it.
//!
//! * The chat `id` names the session: a `ses_…` id is that session; any other id
//!   (1–128 characters of `A–Z a–z 0–9 _ -`, what the SDK's `generateId` makes) names
//!   a session of the caller's, made on first use in the body's `projectId`
//!   ([`spool_engine::Sessions::named_or_create`]).
//! * The last message decides what happens. A user message: its text parts are the
//!   prompt and its `file` parts (a data URL or Spool's own attachment URL) its files,
//!   with `ai-sdk:<message id>` as the requestId, so a retried POST follows the run it
//!   started instead of prompting twice. An assistant message with tool
//!   parts in the `approval-responded` state (what `addToolApprovalResponse` leaves):
//!   each decision is applied to its `per_…` approval (approved: once; denied: reject,
//!   with the reason or a default one as the message, so the model is told and the run
//!   goes on), and the answer is the continuation of the same message from the frame
//!   after the interrupt. A question is answered the same way by the output that
//!   `addToolOutput` leaves on its `question` part: `{answer}` fills the approval its
//!   `callProviderMetadata.spool.approvalId` names, an `output-error` rejects it with the
//!   `errorText`.
//! * Client-side tools: the body's `tools` (`{<name>: {description, inputSchema}}`, sent
//!   in the transport's `body` as `projectId` is) are declared with the prompt. A call of
//!   one parks the run and reaches the client as a call it answers (`onToolCall`); the
//!   output `addToolOutput` leaves on its part is the call's result, decided on the
//!   approval its `callProviderMetadata.spool.approvalId` names (`output-error`: an
//!   error result, `errorText` its text). The transport sends the whole chat every time,
//!   so the same output again (its key is a digest of it) replays the first answer, and
//!   a call answered before is left as it was.
//! * The stream ends with `data: [DONE]` after `finish`, `abort` or `error`, and after
//!   a `tool-approval-request` (or a question) that still waits once the stream has
//!   caught up with the live frames. A connection that is cut ends without it; the run
//!   goes on (closing a stream never cancels a run) and the client resumes with the GET.
//! * `DELETE /api/ai-sdk/chat/:id/stream` stops the chat's active run: what a stop
//!   button sends beside the SDK's `stop()`. `stop()` only aborts the request, and on the
//!   wire that is what a closed tab or a dropped network does too — which must leave the
//!   run going so the client can resume it — so the abort alone cancels nothing.
//! * The GET answers 204 when the chat has no active run, else the active run's
//!   stream from its start: replayed exactly from the session's buffer, or drawn from
//!   a snapshot when its first frames have left it. The AI SDK's `DefaultChatTransport`
//!   treats a resumed stream as a replay (`resumeStreamIsReplay`), so the reloaded
//!   client ends with the same message, without duplicated text.

use crate::dialect::RunForms;
use crate::dialect::ai_sdk::{self, AiSdkForm, AiSdkStream, UiChunk};
use crate::dialect::shared::{self, Forms};
use crate::dialect::{QUESTION_TOOL, asks_for_input};
use crate::error::ApiError;
use crate::extract::BodyCheck;
use crate::extract::{Acting, JsonBody, json_body};
use crate::http::responses::{StreamErrors, WriteErrors};
use crate::http::run_feed::{
    self, AfterInterrupt, ChatDialect, Continuation, FromSnapshot, Place, Ready, RunDialect, RunFeed,
};
use crate::http::sse;
use crate::http::stream_events::UiMessageStreamEvent;
use crate::revocation::{StreamCaller, watched};
use crate::state::AppState;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::Deserialize;
use spool_engine::Viewer;
use spool_engine::{DecisionInput, DecisionOutcome, DecisionTarget, Engine, EngineError, PromptInput};
use spool_protocol::ClientKind;
use spool_protocol::api::{Aborted, ClientTool, PromptPart};
use spool_protocol::approval::ClientOutput;
use spool_protocol::{Approval, ApprovalId, ApprovalStatus, Decision, ProjectId, RunId, SessionId, UserId};
use std::collections::BTreeMap;
use tokio_util::sync::CancellationToken;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        // The last user message may carry files inline (data URLs), and the transport
        // sends the whole history with them: a larger body than other routes.
        .merge(
            OpenApiRouter::new()
                .routes(routes!(chat))
                .layer(axum::extract::DefaultBodyLimit::max(crate::http::attachments::INLINE_BODY_BYTES)),
        )
        .routes(routes!(reconnect, stop))
}

/// The longest chat id accepted.
const MAX_CHAT_ID: usize = 128;
/// The most approval answers one request may carry.
pub(crate) const MAX_ANSWERS: usize = 32;
/// The message a denial without a reason tells the model.
pub(crate) const DENIED: &str = "The user denied this tool call.";
/// The error a client tool's `output-error` without an `errorText` gives the model.
const CLIENT_TOOL_FAILED: &str = "The client's tool failed.";

/// What `DefaultChatTransport` sends (the fields Spool reads; others are ignored).
#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct ChatRequest {
    /// The chat id: a `ses_…` session, or a name of the caller's for one (1–128
    /// characters of `A-Z a-z 0-9 _ -`), made on first use in `projectId`.
    #[schema(pattern = "^[A-Za-z0-9_-]{1,128}$")]
    id: String,
    /// The chat's messages (UI messages); only the last one is read.
    #[schema(min_items = 1)]
    messages: Vec<UiMessage>,
    /// `submit-message` or `regenerate-message`. A regenerate prompts the text again
    /// as a new run (Spool keeps the earlier answer).
    trigger: Option<String>,
    /// A chat whose id names no session yet: the `prj_…` project to start it in (the
    /// transport's `body` option).
    project_id: Option<String>,
    /// Tools the client runs itself, by name (the transport's `body` option, beside
    /// `projectId`): offered to the model with the prompt of the last user message. A
    /// call of one reaches the client as a tool call it answers (`onToolCall`, then
    /// `addToolOutput`). Read with a prompt only: the continuation after an answer keeps
    /// the tools its prompt declared.
    #[schema(value_type = Option<BTreeMap<String, ChatTool>>)]
    tools: Option<BTreeMap<String, ChatTool>>,
}

/// A tool the client runs itself: what the model is told it does and a JSON Schema of
/// its input (`{"type": "object", …}`; absent: no input).
#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = ai_sdk::ChatTool)]
struct ChatTool {
    description: Option<String>,
    #[schema(value_type = Option<Object>)]
    input_schema: Option<serde_json::Value>,
}

/// A UI message: `role` and its `parts`, of which Spool reads `text` parts and tool
/// parts' `approval`.
#[derive(Deserialize, ToSchema)]
struct UiMessage {
    id: Option<String>,
    role: String,
    #[schema(value_type = Vec<UiPart>)]
    parts: Vec<serde_json::Value>,
}

/// A UI message part, for the document only (parts are read as JSON): Spool reads
/// `text` parts' `text`, the last user message's `file` parts, tool parts' `state` and `approval`, and the `output` or
/// `errorText` of a question or of a call of a client tool with its
/// `callProviderMetadata`; other fields and other parts are ignored.
#[derive(ToSchema)]
#[allow(dead_code)]
struct UiPart {
    /// `text`, `dynamic-tool`, `tool-<name>`, `step-start`, …
    #[schema(rename = "type")]
    kind: String,
    text: Option<String>,
    /// A `file` part's bytes: a `data:` URL (base64), or one of Spool's own
    /// `/api/attachments/att_…` URLs; Spool fetches no other URL.
    url: Option<String>,
    /// A `file` part's media type (the bytes are sniffed all the same).
    #[schema(rename = "mediaType")]
    media_type: Option<String>,
    /// A `file` part's name.
    filename: Option<String>,
    /// A tool part's state; `approval-responded` carries a decision.
    state: Option<String>,
    /// `{id, approved, reason?}` in the `approval-responded` state.
    #[schema(value_type = Option<Object>)]
    approval: Option<serde_json::Value>,
    /// A dynamic tool part's tool: `question`, or a client tool's name.
    #[schema(rename = "toolName")]
    tool_name: Option<String>,
    /// A question's answer, `{answer}`, or what a client tool returned (any JSON), in
    /// the `output-available` state.
    #[schema(value_type = Option<Object>)]
    output: Option<serde_json::Value>,
    /// Why the person declined a question, or a client tool's error, in the
    /// `output-error` state.
    #[schema(rename = "errorText")]
    error_text: Option<String>,
    /// A question's or client call's `{spool: {approvalId}}`, as its
    /// `tool-input-available` sent it.
    #[schema(rename = "callProviderMetadata", value_type = Option<Object>)]
    call_provider_metadata: Option<serde_json::Value>,
}

/// What a request asks for.
enum Action {
    Prompt { text: String, request_id: Option<String>, tools: Vec<ClientTool>, files: Vec<PromptPart> },
    Answer(Vec<Answer>),
}

/// A tool part's `approval` in the `approval-responded` state, a question's output (or
/// an AG-UI resume entry): a person's decision on one approval.
pub(crate) struct Answer {
    pub(crate) approval: ApprovalId,
    pub(crate) reply: Reply,
}

/// What the person said.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Reply {
    /// Run the call (a question: went on without answering).
    Approve,
    /// Do not run it; the model is told why (the reason, or [`DENIED`]).
    Deny(Option<String>),
    /// A question's answer: the `fill` decision `{answer}`.
    Answer(String),
    /// What the client's own tool returned: the `output` decision.
    Output(ClientOutput),
}

impl Reply {
    /// A short name for idempotency keys.
    pub(crate) fn label(&self) -> &'static str {
        match self {
            Reply::Approve => "approved",
            Reply::Deny(_) => "denied",
            Reply::Answer(_) => "answered",
            Reply::Output(_) => "output",
        }
    }
}

impl ChatRequest {
    fn action(&self) -> Result<Action, ApiError> {
        check_chat_id(&self.id)?;
        let Some(last) = self.messages.last() else {
            return Err(ApiError::bad_request("no_messages", "the request has no messages"));
        };
        match last.role.as_str() {
            "user" => {
                let texts: Vec<&str> =
                    last.parts.iter().filter(|p| p["type"] == "text").filter_map(|p| p["text"].as_str()).collect();
                let text = texts.join("\n");
                // Only this message's files: the transport sends the whole history, and
                // the earlier messages' files went with their own prompts.
                let files: Vec<PromptPart> = last.parts.iter().filter(|p| p["type"] == "file").map(file_part).collect();
                if text.trim().is_empty() && files.is_empty() {
                    return Err(EngineError::invalid("empty_prompt", "the last user message has no text").into());
                }
                // A regenerate sends the same message again and means a new answer.
                let regenerate = self.trigger.as_deref() == Some("regenerate-message");
                let request_id = last.id.as_ref().filter(|_| !regenerate).map(|id| format!("ai-sdk:{id}"));
                Ok(Action::Prompt { text, request_id, tools: self.client_tools(), files })
            }
            "assistant" => {
                let answers = last.parts.iter().filter_map(part_answer);
                let answers: Vec<Answer> = answers.collect::<Result<_, _>>()?;
                if answers.is_empty() {
                    return Err(ApiError::bad_request(
                        "nothing_to_answer",
                        "the last message is an assistant message without approval responses",
                    ));
                }
                if answers.len() > MAX_ANSWERS {
                    return Err(ApiError::bad_request(
                        "too_many_answers",
                        format!("at most {MAX_ANSWERS} approval responses per request"),
                    ));
                }
                Ok(Action::Answer(answers))
            }
            _ => Err(ApiError::bad_request("invalid_role", "the last message must be a user or assistant message")),
        }
    }
}

impl ChatRequest {
    /// The declared client tools, as the engine takes them.
    fn client_tools(&self) -> Vec<ClientTool> {
        let declared = self.tools.iter().flatten();
        declared
            .map(|(name, tool)| ClientTool {
                name: name.clone(),
                description: tool.description.clone().unwrap_or_default(),
                parameters: tool.input_schema.clone(),
            })
            .collect()
    }
}

/// The answer a part of the last assistant message carries, if any: a tool approval
/// response, the output `addToolOutput` gave a question (Spool's own outputs are text,
/// never `{answer}`, so a question answered earlier in the message is no answer), or
/// the output or error it gave a call of a client tool (one answered earlier comes
/// again with each request: [`answer`] leaves it as it was).
fn part_answer(part: &serde_json::Value) -> Option<Result<Answer, ApiError>> {
    if part["state"] == "approval-responded" {
        let approval = &part["approval"];
        let id = approval["id"].as_str().and_then(|id| id.parse().ok());
        return Some(match (id, approval["approved"].as_bool()) {
            (Some(approval), Some(true)) => Ok(Answer { approval, reply: Reply::Approve }),
            (Some(approval), Some(false)) => {
                Ok(Answer { approval, reply: Reply::Deny(approval_reason(&part["approval"]["reason"])) })
            }
            _ => Err(ApiError::bad_request(
                "invalid_approval",
                "an approval-responded part needs approval.id (a per_… id) and approval.approved",
            )),
        });
    }
    let asked = &part["callProviderMetadata"]["spool"]["approvalId"];
    let question = part["toolName"] == QUESTION_TOOL || part["type"] == format!("tool-{QUESTION_TOOL}");
    let reply = match (part["state"].as_str(), question) {
        (Some("output-available"), true) => Reply::Answer(part["output"]["answer"].as_str()?.to_owned()),
        (Some("output-error"), true) => Reply::Deny(approval_reason(&part["errorText"])),
        (Some("output-available"), false) => {
            Reply::Output(ClientOutput { output: part["output"].clone(), is_error: false })
        }
        (Some("output-error"), false) => {
            let error = approval_reason(&part["errorText"]).unwrap_or_else(|| CLIENT_TOOL_FAILED.to_owned());
            Reply::Output(ClientOutput { output: error.into(), is_error: true })
        }
        _ => return None,
    };
    if asked.is_null() {
        return None;
    }
    Some(match asked.as_str().and_then(|id| id.parse().ok()) {
        Some(approval) => Ok(Answer { approval, reply }),
        None => Err(ApiError::bad_request(
            "invalid_approval",
            "a tool part's callProviderMetadata.spool.approvalId is a per_… id",
        )),
    })
}

/// A `file` part `{mediaType, filename?, url}` as the native file part; `url` is a data
/// URL (what `sendMessage({files})` makes of a `FileList`) or one of Spool's own
/// attachment URLs. A part without a `url` is refused when the files are read.
fn file_part(part: &serde_json::Value) -> PromptPart {
    let field = |name: &str| part[name].as_str().map(str::to_owned);
    match field("url") {
        Some(url) => shared::file_part(url, field("mediaType"), field("filename")),
        None => PromptPart::File { id: None, url: None, name: None, media_type: None },
    }
}

pub(crate) fn approval_reason(reason: &serde_json::Value) -> Option<String> {
    reason.as_str().map(str::trim).filter(|r| !r.is_empty()).map(str::to_owned)
}

/// A chat id is a `ses_…` id or 1–128 characters of `A-Z a-z 0-9 _ -`.
pub(crate) fn check_chat_id(id: &str) -> Result<(), ApiError> {
    let fine = (1..=MAX_CHAT_ID).contains(&id.len())
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    match fine {
        true => Ok(()),
        false => Err(ApiError::bad_request(
            "invalid_chat_id",
            format!("a chat id is 1 to {MAX_CHAT_ID} characters of A-Z, a-z, 0-9, _ and -"),
        )),
    }
}

/// The session a chat id names, if there is one.
pub(crate) async fn chat_session(engine: &Engine, user: &UserId, id: &str) -> Result<Option<SessionId>, ApiError> {
    match id.parse::<SessionId>() {
        Ok(session) => Ok(Some(session)),
        Err(_) => Ok(engine.sessions().named(user, id).await?),
    }
}

/// `named` (the session a chat id names), or else one made under the id in `project` (a
/// `prj_…` id) on first use; `missing` tells a client that sent no project where to send it.
pub(crate) async fn session_or_new(
    engine: &Engine,
    user: &UserId,
    chat: &str,
    named: Option<SessionId>,
    project: Option<&str>,
    missing: &'static str,
) -> Result<SessionId, ApiError> {
    if let Some(session) = named {
        return Ok(session);
    }
    let Some(project) = project else { return Err(ApiError::bad_request("missing_project", missing)) };
    let project: ProjectId = project.parse().map_err(|_| ApiError::not_found("project"))?;
    Ok(engine.sessions().named_or_create(user, chat, &project).await?.0)
}

/// Streams a chat turn of the AI SDK: the prompt of the last user message, or the
/// continuation after the approval responses of the last assistant message. Answers
/// the UI message stream protocol (`x-vercel-ai-ui-message-stream: v1`, `data:` JSON
/// chunks, `data: [DONE]`).
#[utoipa::path(
    post,
    path = "/api/ai-sdk/chat",
    tag = "streams",
    request_body = ChatRequest,
    responses(
        (status = 200, description = "The UI message stream", content_type = "text/event-stream", body = UiMessageStreamEvent),
        WriteErrors,
    )
)]
async fn chat(
    State(state): State<AppState>,
    StreamCaller { user, connection, watch }: StreamCaller,
    JsonBody(body): JsonBody<ChatRequest>,
) -> Result<Response, ApiError> {
    let engine = &state.engine;
    let action = body.action()?;
    let feed = match action {
        Action::Prompt { text, request_id, tools, files } => {
            let named = chat_session(engine, &user, &body.id).await?;
            let project = body.project_id.as_deref();
            let missing = "this chat has no session yet: send a projectId to start one";
            let session = session_or_new(engine, &user, &body.id, named, project, missing).await?;
            let files = shared::prompt_files(engine, &user, files).await?;
            let input = PromptInput { text, request_id, client_tools: tools, files, ..PromptInput::default() };
            run_feed::prompt_chat(engine, &user, &session, input, connection).await?
        }
        Action::Answer(answers) => {
            let session = chat_session(engine, &user, &body.id).await?.ok_or(ApiError::not_found("session"))?;
            match answer(engine, &user, &session, answers, decision_key).await? {
                Ok((approval, denied)) => attach_after(engine, &user, &approval, denied, connection).await?,
                Err(refused) => return Ok(refused),
            }
        }
    };
    Ok(watched(stream_response(feed, &state), watch))
}

/// The idempotency key of a decision of this dialect: the approval's, and for a client
/// tool's output a digest of the output too, so the same output sent again (the
/// transport re-sends the whole chat) replays the first answer and another one is 409
/// `already_resolved`.
fn decision_key(approval: &ApprovalId, reply: &Reply) -> String {
    match reply {
        Reply::Output(output) => format!("ai-sdk:{approval}:output:{}", shared::output_digest(output)),
        _ => format!("ai-sdk:{approval}"),
    }
}

/// Applies the approval responses; `Ok((approval, denied))` is the last one decided here
/// (the continuation follows it) and whether a call was denied (a tool call rejected,
/// which the client shows as denied; a declined question is the tool's error instead),
/// `Err(response)` the engine's JSON refusal when none was. `key` makes each decision's
/// idempotency key (from the approval and the reply), so a retried request returns the
/// first answer. An answer to an approval that asks no question is refused (400
/// `not_a_question`) before anything is decided: `fill` would run that call with it.
pub(crate) async fn answer(
    engine: &Engine,
    user: &UserId,
    session: &SessionId,
    answers: Vec<Answer>,
    key: impl Fn(&ApprovalId, &Reply) -> String,
) -> Result<Result<(Approval, bool), Response>, ApiError> {
    let mut found_all = Vec::with_capacity(answers.len());
    for answer in answers {
        let found = engine.runs().approval(user, &answer.approval).await?;
        if &found.session_id != session {
            return Err(ApiError::not_found("approval"));
        }
        if matches!(answer.reply, Reply::Output(_)) != found.is_client_call() {
            let message = match found.is_client_call() {
                true => {
                    format!("{} is a call of the client's tool {}: answer it with its output", found.id, found.tool)
                }
                false => format!("{} is not a call of a client tool: it takes no output", found.id),
            };
            return Err(ApiError::bad_request("wrong_answer_kind", message));
        }
        if matches!(answer.reply, Reply::Answer(_)) && !asks_for_input(&found) {
            return Err(ApiError::bad_request(
                "not_a_question",
                format!(
                    "{} asks whether a call may run, not a question: answer it with approved true or false",
                    found.id
                ),
            ));
        }
        found_all.push((answer, found));
    }
    let mut last = None;
    let mut refusal = None;
    for (Answer { approval, reply }, found) in found_all {
        // Earlier answers of the chat come along in its history; only the open ones
        // and the ones this key decided (a retried request) are decided again.
        let idempotency_key = Some(key(&approval, &reply));
        let (decision, message) = match reply {
            Reply::Approve => (Decision::Once, None),
            Reply::Deny(reason) => (Decision::Reject, Some(reason.unwrap_or_else(|| DENIED.to_owned()))),
            Reply::Answer(answer) => (Decision::Fill(serde_json::json!({ "answer": answer })), None),
            Reply::Output(output) => (Decision::Output(output), None),
        };
        let input = DecisionInput { decision, message, idempotency_key, patterns: None, via: None };
        let target = DecisionTarget::Run(found.run_id.clone());
        match engine.runs().decide(user, target, &approval, input).await {
            Ok(DecisionOutcome::Applied { decision, .. }) => {
                let denied = decision == Decision::Reject && !asks_for_input(&found);
                last = Some((found, denied));
            }
            Ok(DecisionOutcome::ResourceChanged { .. }) => last = Some((found, false)),
            Ok(outcome) => {
                if found.status == ApprovalStatus::Pending {
                    refusal = Some(crate::http::decision::decision_response(&outcome));
                }
            }
            Err(e) => refusal = Some(ApiError::from(e).into_response()),
        }
    }
    match (last, refusal) {
        (Some(approval), _) => Ok(Ok(approval)),
        (None, Some(refusal)) => Ok(Err(refusal)),
        (None, None) => Err(ApiError::from(EngineError::Conflict {
            code: "already_resolved",
            message: "every approval this message answers was decided before".into(),
        })),
    }
}

/// `GET /api/ai-sdk/chat/:id/stream`: the chat's active run from its start, or 204
/// when it has none (also for a chat id that names no session yet).
#[utoipa::path(
    get,
    path = "/api/ai-sdk/chat/{id}/stream",
    tag = "streams",
    params(("id" = String, Path, description = "The chat id", max_length = 128, pattern = "^[A-Za-z0-9_-]{1,128}$")),
    responses(
        (status = 200, description = "The active run's UI message stream, from its start", content_type = "text/event-stream", body = UiMessageStreamEvent),
        (status = 204, description = "The chat has no active run"),
        StreamErrors,
    )
)]
async fn reconnect(
    State(state): State<AppState>,
    StreamCaller { user, connection, watch }: StreamCaller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let engine = &state.engine;
    check_chat_id(&id)?;
    let Some(session) = chat_session(engine, &user, &id).await? else {
        return Ok(StatusCode::NO_CONTENT.into_response());
    };
    let detail = engine.sessions().get(&user, &session).await?;
    let Some(active) = detail.state.active_run else {
        return Ok(StatusCode::NO_CONTENT.into_response());
    };
    let run = engine.runs().get(&user, &active.run_id).await?;
    let feed = run_feed::attach_from_start(engine, &user, run, connection).await?;
    Ok(watched(stream_response(feed, &state), watch))
}

/// `DELETE /api/ai-sdk/chat/:id/stream`: stops the chat's active run, as
/// `POST /api/sessions/:id/abort` does; settled as `cancelled` when it answers. A chat
/// with nothing running (or no session yet) answers `{aborted: false}`.
#[utoipa::path(
    delete,
    path = "/api/ai-sdk/chat/{id}/stream",
    tag = "runs",
    params(("id" = String, Path, description = "The chat id", max_length = 128, pattern = "^[A-Za-z0-9_-]{1,128}$")),
    responses((status = 200, body = Aborted), WriteErrors)
)]
async fn stop(Acting { engine, user }: Acting, Path(id): Path<String>) -> Result<Json<Aborted>, ApiError> {
    check_chat_id(&id)?;
    let Some(session) = chat_session(&engine, &user, &id).await? else {
        return Ok(Json(Aborted { aborted: false, run_id: None }));
    };
    let run_id = engine.runs().abort(&user, &session).await?;
    Ok(Json(Aborted { aborted: run_id.is_some(), run_id }))
}

/// Follows `approval`'s run from the frame after its request: the continuation of the
/// message the client holds.
async fn attach_after(
    engine: &Engine,
    user: &UserId,
    approval: &Approval,
    denied: bool,
    kill: CancellationToken,
) -> Result<Feed, ApiError> {
    let AfterInterrupt { run, subscription, waiting, from } =
        run_feed::subscribe_after(engine, user, approval, kill, UiStream::VIEWER).await?;
    let (form, fold) = match from {
        Continuation::AfterRequest => {
            (AiSdkForm::After(approval.id.clone()), AiSdkStream::continuing(approval, waiting, denied))
        }
        Continuation::RunStart => {
            (AiSdkForm::Muted(approval.id.clone()), AiSdkStream::muted_until(approval, waiting, denied))
        }
        // The client gets a `start` for the same message and redraws it.
        Continuation::Snapshot => return run_feed::from_snapshot(engine, user, subscription, run, None).await,
    };
    let mut feed = Feed::new(subscription, form, fold, UiStream);
    feed.push(None, ai_sdk::continuation_start(approval, denied));
    Ok(feed)
}

/// The AI SDK as a [`RunDialect`]: UI message chunks, and `[DONE]` last (after the end
/// of the step and the message when the run waits at an approval).
struct UiStream;

/// The AI SDK draws the whole message again whatever the client holds (`after` aside):
/// the client gets a `start` for the same message and redraws it.
impl ChatDialect for UiStream {
    fn from_snapshot(from: &FromSnapshot, _after: Option<&Approval>) -> (AiSdkStream, Self, Vec<Bytes>) {
        let (fold, chunks) = AiSdkStream::from_snapshot(&from.run, from.state(), &from.messages);
        (fold, UiStream, chunks.iter().map(UiChunk::to_sse).collect())
    }
}

impl RunDialect for UiStream {
    type Key = AiSdkForm;
    type Fold = AiSdkStream;
    /// The chat shows approvals and answers them (`addToolApprovalResponse`).
    const VIEWER: Viewer = Viewer { kind: ClientKind::AiSdk, answers: true };

    fn from_start(run: RunId) -> (AiSdkForm, AiSdkStream, Self) {
        (AiSdkForm::Run(run.clone()), AiSdkStream::new(run), UiStream)
    }

    fn forms(forms: &RunForms) -> &Forms<AiSdkForm, AiSdkStream> {
        &forms.ai_sdk
    }

    fn start(&mut self, fold: &AiSdkStream) -> Place {
        Place { waiting: fold.waiting(), finished: fold.finished() }
    }

    fn step(&mut self, step: &ai_sdk::Step, ready: &mut Ready) -> Place {
        if !step.bytes.is_empty() {
            ready.push_back((None, step.bytes.clone()));
        }
        Place { waiting: step.waiting, finished: step.finished }
    }

    fn close(&mut self, place: Place, ready: &mut Ready) {
        if !place.finished {
            ready.push_back((None, ai_sdk::parked_end()));
        }
        ready.push_back((None, Bytes::from_static(ai_sdk::DONE)));
    }
}

type Feed = RunFeed<UiStream>;

/// The UI message stream response.
fn stream_response(feed: Feed, state: &AppState) -> Response {
    let mut response = run_feed::response(feed, state, sse::EVENT_STREAM_UTF8);
    response
        .headers_mut()
        .insert(HeaderName::from_static("x-vercel-ai-ui-message-stream"), HeaderValue::from_static("v1"));
    response
}

/// The body this module reads, parsed and checked as its handler does.
pub(crate) const BODIES: &[(&str, BodyCheck)] =
    &[("POST /api/ai-sdk/chat", |b| json_body::<ChatRequest>(b)?.action().map(drop))];
