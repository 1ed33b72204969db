//! The AG-UI endpoint: `POST /api/ag-ui` takes AG-UI's `RunAgentInput` (what
//! `@ag-ui/client`'s `HttpAgent` posts) and answers with an SSE stream of AG-UI events.
//! The mapping from native frames is `dialect::ag_ui`; this file only feeds it.
//!
//! * `threadId` names the session: a `ses_…` id is that session (someone else's is a
//!   404); any other id (1–128 characters of `A–Z a–z 0–9 _ -`, which covers the UUIDs
//!   `HttpAgent` makes) names a session of the caller's, made on first use in
//!   `forwardedProps.projectId` — the same names the AI SDK's chat ids use.
//! * `runId` is the client's id for its request; Spool names the run itself. The
//!   stream's `RUN_STARTED` and `RUN_FINISHED` carry the Spool run's `run_…` id, and a
//!   run parked at an approval keeps that id in the stream that continues it.
//! * Without `resume`, the last `user` message is the prompt, with
//!   `ag-ui:<message id>` as the requestId: a retried request (the same user message)
//!   follows the run it started, from its start, instead of prompting twice.
//!   `context` and `state` are accepted and not used: Spool's state is what
//!   `STATE_SNAPSHOT` sends.
//! * `tools` are the client's own (frontend tools, `{name, description, parameters}`):
//!   the prompt offers them to the model beside Spool's (`PromptInput.client_tools`;
//!   the engine refuses a bad one, 400 `invalid_client_tool`, or one named like Spool's,
//!   400 `client_tool_conflict`). A call of one parks the run like an approval (with
//!   its own expiry) and ends the stream with `RUN_FINISHED` outcome
//!   `{type: "success", pendingToolCallIds: [<call>]}`, the call the model's id as
//!   `TOOL_CALL_START` named it; nothing runs it on the server. The client runs it and
//!   posts the conversation again with a `tool` message for it (`toolCallId`, `content`
//!   a string or text parts, joined; `error` marks it failed): when the messages end,
//!   after the last user message, with `tool` messages for calls the thread's session
//!   waits for, each is decided as the call's result (`Decision::Output`, idempotency
//!   key `ag-ui:<approval>:output:<digest of the result>`) instead of prompting, and
//!   the stream is the continuation: the rest of the run, without the call's
//!   `TOOL_CALL_RESULT` (the client has the tool message it sent; `@ag-ui/client` would
//!   append the event as a second one). A tool message for a call that waits for nothing (answered before, or a
//!   result of Spool's own tools the client keeps) is not read: the same request sent
//!   again finds its user message's run and follows it, so a result is taken once.
//! * A run that stops at an approval ends its stream with `RUN_FINISHED` and the
//!   `interrupt` outcome, one interrupt per approval (`id` the `per_…` approval). The
//!   next request answers it in `resume`: `status: "resolved"` with
//!   `payload: {approved: true}` runs the call once, `{approved: false, reason}` or
//!   `status: "cancelled"` rejects it (the model is told, with the reason, and goes
//!   on). Each decision is taken once: the same answer again (a retried request) gets
//!   the first response, a different answer to a decided approval is a 409; the
//!   answer's stream is the continuation from the frame after the interrupt. An
//!   interrupt settled meanwhile (expired, decided through Spool's own routes, its run
//!   cancelled) is answered `cancelled` to read on from it; `resolved` is refused (409,
//!   or 410 once expired).
//! * A question (the `question` tool) is an interrupt with `reason: "question"`, the
//!   question as its `message` and the options in its `responseSchema`; `resolved` with
//!   `payload: {answer}` (an option's label or the person's own words) is its `fill`.
//!   Approve and reject work on it as on any interrupt; an `answer` to an interrupt that
//!   is no question is a 400 `not_a_question`.
//! * A stream that goes away (the client aborted the request with `agent.abortRun()`,
//!   its tab closed, its network dropped, the server cut a client too slow to read)
//!   cancels nothing: the run goes on. The server cannot tell an abort from a lost
//!   connection (both only close it), and AG-UI has no cancel request, so stopping a
//!   run is a request of its own: `POST /api/sessions/{id}/abort`. A client that wants
//!   the old behaviour asks for it with `forwardedProps.onDisconnect: "cancel"`: then a
//!   stream that goes before its last event cancels its run.
//! * A stream that follows a run from its start numbers its events: `id: N`, the
//!   `RUN_STARTED` 1, counting every AG-UI event of the stream. `GET
//!   /api/ag-ui/runs/{runId}/events` re-attaches: the same events, numbered the same way,
//!   from the one after `Last-Event-ID` (or `?after=N`), then live, to `RUN_FINISHED` or
//!   `RUN_ERROR`. AG-UI clients check each stream on its own (it opens with
//!   `RUN_STARTED`; content follows its `*_START`), so the re-attaching stream opens
//!   with its own `RUN_STARTED` and `STATE_SNAPSHOT` and the `*_START` of the message,
//!   tool call or reasoning the client was in the middle of, unnumbered; an `HttpAgent`
//!   reads it with `connectAgent()` and appends to the message it has. The events come
//!   from the session's buffer while it holds the run's start, else from the run's
//!   frame log; when neither can (no log), the run is drawn whole from the store,
//!   unnumbered, as a retry is.
//! * The continuation of an interrupt (the stream answering a `resume`, or a client
//!   call's `tool` message) numbers its events after the approval it continues:
//!   `id: <approval>:N`, its own `RUN_STARTED` 1, counting the same way (the
//!   continuation is the same fold of the run's frames after the request, whichever
//!   stream draws it); the decision it opens with comes in the opening's write,
//!   unnumbered and uncounted. `Last-Event-ID: <approval>:N` (or `?after=`) re-attaches
//!   to the continuation after N, opened again as above, without the decision: from the
//!   session's buffer, else the run's frame log (folded in silence up to the request),
//!   else the continuation drawn from the store, unnumbered (text the client has may
//!   come again).
//! * Presence (`CUSTOM` `spool.presence`, see `dialect::ag_ui`) comes on a timer and is
//!   never numbered or counted, in any stream: a re-attach sends only what came after
//!   the client's last event.

use crate::dialect::RunForms;
use crate::dialect::ag_ui::{self, AgUiEvent, AgUiForm, AgUiStream, Close};
use crate::dialect::ai_sdk::routes::{self as ai_sdk, Answer, DENIED, MAX_ANSWERS, Reply};
use crate::dialect::run_stream::routes::checked_after;
use crate::dialect::shared::{self, FormMapper, Forms, RunForm};
use crate::error::ApiError;
use crate::extract::BodyCheck;
use crate::extract::{JsonBody, PathId, QueryParams, json_body};
use crate::http::responses::{StreamErrors, WriteErrors};
use crate::http::run_feed::{
    self, AfterInterrupt, ChatDialect, Continuation, FromSnapshot, Place, Ready, RunDialect, RunFeed,
};
use crate::http::sse;
use crate::http::stream_events::AgUiStreamEvent;
use crate::revocation::{StreamCaller, watched};
use crate::state::AppState;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha256};
use spool_engine::Viewer;
use spool_engine::{
    DecisionInput, DecisionOutcome, DecisionTarget, Engine, EngineError, PromptInput, RunAfter, RunFrom,
};
use spool_protocol::ClientKind;
use spool_protocol::api::{ClientTool, PromptPart};
use spool_protocol::approval::{ClientOutput, Decision};
use spool_protocol::{Approval, ApprovalId, ApprovalStatus, Run, RunError, RunId, RunStatus, SessionId, UserId};
use tokio_util::sync::CancellationToken;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        // A user message may carry files inline (base64 sources), and the client sends
        // the whole conversation with them: a larger body than other routes.
        .merge(
            OpenApiRouter::new()
                .routes(routes!(run_agent))
                .layer(axum::extract::DefaultBodyLimit::max(crate::http::attachments::INLINE_BODY_BYTES)),
        )
        .routes(routes!(run_events))
}

/// The longest thread id accepted.
const MAX_THREAD_ID: usize = 128;
/// The longest message id that can name a prompt (`ag-ui:` and it make the requestId,
/// at most 128 characters).
const MAX_MESSAGE_ID: usize = 122;
/// The idempotency prefix of the prompts and decisions this endpoint makes.
const DIALECT: &str = "ag-ui";

/// AG-UI's `RunAgentInput` (the fields Spool reads; others are ignored).
#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct RunAgentInput {
    /// The thread: a `ses_…` session, or a name of the caller's for one (1–128
    /// characters of `A-Z a-z 0-9 _ -`), made on first use in
    /// `forwardedProps.projectId`.
    #[schema(pattern = "^[A-Za-z0-9_-]{1,128}$")]
    thread_id: String,
    /// The client's id for this request. Spool names the run itself: `RUN_STARTED`
    /// carries the `run_…` id.
    #[allow(dead_code)]
    run_id: String,
    /// The conversation; the last `user` message is the prompt.
    messages: Vec<AgUiMessage>,
    /// Answers to the interrupts the previous request ended with.
    #[serde(default)]
    resume: Vec<ResumeEntry>,
    /// `{projectId}`: where a thread id that names no session yet starts one.
    #[serde(default)]
    #[schema(value_type = Option<ForwardedProps>)]
    forwarded_props: Value,
    /// The client's own tools (AG-UI's `Tool`: `{name, description, parameters}`),
    /// offered to the model beside Spool's with the prompt. A call of one ends the
    /// stream `success` with the call in `pendingToolCallIds`; the next request answers
    /// it with a `tool` message. Read with a prompt only: a continuation keeps the
    /// tools its prompt declared.
    #[serde(default)]
    tools: Option<Vec<ClientTool>>,
    /// Accepted, not used.
    #[serde(default)]
    #[schema(value_type = Option<Vec<Object>>)]
    #[allow(dead_code)]
    context: Value,
    /// Accepted, not used: the state is Spool's (`STATE_SNAPSHOT`).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    #[allow(dead_code)]
    state: Value,
}

/// An AG-UI message: Spool reads a user message's `content`, a string or an array of
/// parts of which `text` parts are its text and `image`, `document`, `audio`, `video`
/// and legacy `binary` parts its files, and a `tool` message's `toolCallId`, `content`
/// and `error` when it answers a call of a client tool.
#[derive(Deserialize, ToSchema)]
struct AgUiMessage {
    id: String,
    /// `user`, `assistant`, `system`, `developer`, `tool`, `reasoning` or `activity`.
    role: String,
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    content: Value,
    /// A `tool` message's call: the `toolCallId` of its `TOOL_CALL_START`.
    #[serde(default, rename = "toolCallId")]
    tool_call_id: Option<String>,
    /// A `tool` message's error: the call failed (the model is told so).
    #[serde(default)]
    error: Option<String>,
}

/// The part of `forwardedProps` Spool reads (for the document only).
#[derive(ToSchema)]
#[allow(dead_code)]
struct ForwardedProps {
    /// The `prj_…` project a new thread starts in.
    #[schema(rename = "projectId")]
    project_id: Option<String>,
}

/// An answer to one interrupt.
#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct ResumeEntry {
    /// The `per_…` approval.
    interrupt_id: String,
    /// `resolved` (decided as `payload` says) or `cancelled` (rejected).
    #[schema(pattern = "^(resolved|cancelled)$")]
    status: String,
    /// `{approved, reason?}`, or a question's `{answer}`.
    #[serde(default)]
    #[schema(value_type = Option<ResumePayload>)]
    payload: Value,
}

/// A resume entry's payload (for the document only).
#[derive(ToSchema)]
#[allow(dead_code)]
struct ResumePayload {
    /// Run the call, or not; a question answered this way goes on without an answer.
    approved: Option<bool>,
    /// Told to the model when the call is denied.
    reason: Option<String>,
    /// A question's answer: one of its options' labels, or the person's own words.
    answer: Option<String>,
}

/// What a request asks for.
enum Action {
    /// The last user message, unless `results` answer calls of client tools the
    /// thread's session waits for (then those are decided and nothing is prompted).
    Prompt { text: String, request_id: String, results: Vec<ToolResult>, files: Vec<PromptPart> },
    /// The answers, each with whether it abandons its interrupt (`cancelled`).
    Answer(Vec<(Answer, bool)>),
}

impl RunAgentInput {
    fn action(&self) -> Result<Action, ApiError> {
        if !self.resume.is_empty() {
            if self.resume.len() > MAX_ANSWERS {
                return Err(ApiError::bad_request(
                    "too_many_answers",
                    format!("at most {MAX_ANSWERS} resume entries per request"),
                ));
            }
            return self.resume.iter().map(ResumeEntry::answer).collect::<Result<_, _>>().map(Action::Answer);
        }
        let Some(last) = self.messages.iter().rev().find(|m| m.role == "user") else {
            return Err(ApiError::bad_request("no_user_message", "the request has no user message to prompt"));
        };
        let fine = (1..=MAX_MESSAGE_ID).contains(&last.id.len()) && last.id.bytes().all(|b| b.is_ascii_graphic());
        if !fine {
            return Err(ApiError::bad_request(
                "invalid_message_id",
                format!("a user message's id is 1 to {MAX_MESSAGE_ID} printable ASCII characters"),
            ));
        }
        let text = text_of(&last.content);
        let files = files_of(&last.content)?;
        if text.trim().is_empty() && files.is_empty() {
            return Err(EngineError::invalid("empty_prompt", "the last user message has no text").into());
        }
        let results = self.tool_results();
        Ok(Action::Prompt { text, request_id: format!("{DIALECT}:{}", last.id), results, files })
    }

    /// The `tool` messages the conversation ends with (after its last user message):
    /// what the client's own tools returned.
    fn tool_results(&self) -> Vec<ToolResult> {
        let trailing = self.messages.iter().rev().take_while(|m| m.role == "tool");
        let mut results: Vec<ToolResult> = trailing.filter_map(ToolResult::of).collect();
        results.reverse();
        results
    }
}

/// A `tool` message: the result of the client's own call of one of its tools.
#[derive(Debug, PartialEq)]
struct ToolResult {
    /// The model's call id.
    call: String,
    output: ClientOutput,
}

impl ToolResult {
    /// The content as text (a string, or its `text` parts joined); a message with an
    /// `error` is a failed call, its content (or else the error) what the model is told.
    fn of(message: &AgUiMessage) -> Option<Self> {
        let call = message.tool_call_id.clone().filter(|c| !c.is_empty())?;
        let text = text_of(&message.content);
        let (text, is_error) = match &message.error {
            Some(error) if text.is_empty() => (error.clone(), true),
            Some(_) => (text, true),
            None => (text, false),
        };
        Some(Self { call, output: ClientOutput { output: Value::String(text), is_error } })
    }
}

/// A message's text: its `content` string, or its `text` parts joined by newlines.
fn text_of(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(parts) => {
            let texts: Vec<&str> =
                parts.iter().filter(|p| p["type"] == "text").filter_map(|p| p["text"].as_str()).collect();
            texts.join("\n")
        }
        _ => String::new(),
    }
}

/// A user message's files, as the native file parts: its `image`, `document`, `audio`
/// and `video` parts (AG-UI 1.0) with a `data` source (base64 and its `mimeType`) or a
/// `url` source (a `data:` URL or one of Spool's own attachment URLs; any other is
/// refused when the files are read), named by `metadata.filename`; and the legacy
/// `binary` part (`mimeType`, `data` or `url`, `filename`). A provider's own file id
/// (`source {type: "file"}`) means nothing to Spool: refused.
fn files_of(content: &Value) -> Result<Vec<PromptPart>, ApiError> {
    let Value::Array(parts) = content else { return Ok(Vec::new()) };
    let text = |v: &Value| v.as_str().map(str::to_owned);
    let mut files = Vec::new();
    for part in parts {
        let (url, media_type, filename) = match part["type"].as_str() {
            Some("image" | "document" | "audio" | "video") => {
                let source = &part["source"];
                match (source["type"].as_str(), source["value"].as_str()) {
                    (Some("data"), Some(data)) => {
                        let media_type = source["mimeType"].as_str().unwrap_or_default();
                        (
                            shared::data_url(media_type, data),
                            text(&source["mimeType"]),
                            text(&part["metadata"]["filename"]),
                        )
                    }
                    (Some("url"), Some(url)) => {
                        (url.to_owned(), text(&source["mimeType"]), text(&part["metadata"]["filename"]))
                    }
                    _ => {
                        return Err(ApiError::bad_request(
                            "unsupported_file_source",
                            "a file part's source is `{type: \"data\", value, mimeType}` or `{type: \"url\", value}` \
                             (a data URL or one of Spool's /api/attachments URLs)",
                        ));
                    }
                }
            }
            Some("binary") => {
                let media_type = part["mimeType"].as_str().unwrap_or_default();
                let url = match (part["data"].as_str(), part["url"].as_str()) {
                    (Some(data), _) => shared::data_url(media_type, data),
                    (None, Some(url)) => url.to_owned(),
                    (None, None) => {
                        return Err(ApiError::bad_request(
                            "unsupported_file_source",
                            "a binary part carries `data` (base64) or a `url`",
                        ));
                    }
                };
                (url, text(&part["mimeType"]), text(&part["filename"]))
            }
            _ => continue,
        };
        files.push(shared::file_part(url, media_type, filename));
    }
    Ok(files)
}

impl ResumeEntry {
    fn answer(&self) -> Result<(Answer, bool), ApiError> {
        let approval: ApprovalId = self.interrupt_id.parse().map_err(|_| {
            ApiError::bad_request("invalid_interrupt", "a resume entry's interruptId is a per_… approval id")
        })?;
        let reason = ai_sdk::approval_reason(&self.payload["reason"]);
        let answer = self.payload["answer"].as_str();
        let reply = match (self.status.as_str(), answer, self.payload["approved"].as_bool()) {
            ("cancelled", _, _) => {
                return Ok((Answer { approval, reply: Reply::Deny(reason.or(Some(DENIED.to_owned()))) }, true));
            }
            ("resolved", Some(answer), _) if !answer.trim().is_empty() => Reply::Answer(answer.to_owned()),
            ("resolved", None, Some(true)) => Reply::Approve,
            ("resolved", None, Some(false)) => Reply::Deny(reason),
            _ => {
                return Err(ApiError::bad_request(
                    "invalid_resume",
                    "a resume entry is status \"cancelled\", or \"resolved\" with payload.approved true or false, \
                     or a question's payload.answer (not blank)",
                ));
            }
        };
        Ok((Answer { approval, reply }, false))
    }
}

/// A decision's idempotency key: the approval and the answer, so the same answer again
/// gets the first response and a different one finds the approval decided (409). A
/// question's answer is in it as its digest (a key is at most 128 characters).
fn decision_key(approval: &ApprovalId, reply: &Reply) -> String {
    let label = reply.label();
    match reply {
        Reply::Answer(answer) => {
            let digest = Sha256::digest(answer.as_bytes());
            let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
            format!("{DIALECT}:{approval}:{label}:{hex}")
        }
        _ => format!("{DIALECT}:{approval}:{label}"),
    }
}

/// A thread id is a `ses_…` id or 1–128 characters of `A-Z a-z 0-9 _ -`.
fn check_thread_id(id: &str) -> Result<(), ApiError> {
    let fine = (1..=MAX_THREAD_ID).contains(&id.len())
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    match fine {
        true => Ok(()),
        false => Err(ApiError::bad_request(
            "invalid_thread_id",
            format!("a thread id is 1 to {MAX_THREAD_ID} characters of A-Z, a-z, 0-9, _ and -"),
        )),
    }
}

/// Runs the agent on a thread: the prompt of the last user message, or the
/// continuation after the `resume` answers. Answers AG-UI events as SSE (`data:` JSON,
/// one event each), from `RUN_STARTED` to `RUN_FINISHED` (outcome `success`,
/// `interrupt` or `cancelled`) or `RUN_ERROR`. A prompt's events are numbered (`id: N`),
/// a continuation's after its approval (`id: <approval>:N`), for
/// `GET /api/ag-ui/runs/{runId}/events` to re-attach after; the stream going away
/// cancels nothing unless `forwardedProps.onDisconnect` is `"cancel"`.
#[utoipa::path(
    post,
    path = "/api/ag-ui",
    request_body = RunAgentInput,
    responses(
        (status = 200, description = "The AG-UI event stream", content_type = "text/event-stream", body = AgUiStreamEvent),
        WriteErrors,
    )
)]
async fn run_agent(
    State(state): State<AppState>,
    StreamCaller { user, connection, watch }: StreamCaller,
    JsonBody(body): JsonBody<RunAgentInput>,
) -> Result<Response, ApiError> {
    let engine = &state.engine;
    check_thread_id(&body.thread_id)?;
    // A thread that names a session is checked first: someone else's is a 404 whatever
    // the body asks.
    let named = ai_sdk::chat_session(engine, &user, &body.thread_id).await?;
    if let Some(session) = &named {
        engine.sessions().get(&user, session).await?;
    }
    let action = body.action()?;
    if named.is_none() && matches!(action, Action::Answer(_)) {
        return Err(ApiError::not_found("session"));
    }
    let cancel_on_drop = body.forwarded_props["onDisconnect"] == "cancel";
    let project = body.forwarded_props["projectId"].as_str();
    let missing = "this thread has no session yet: send forwardedProps.projectId to start one";
    // Only a session the thread had before can wait for a client call.
    let existed = named.is_some();
    let session = ai_sdk::session_or_new(engine, &user, &body.thread_id, named, project, missing).await?;
    let thread = body.thread_id.clone();
    let (feed, decision) = match action {
        Action::Prompt { text, request_id, results, files } => {
            let answered = match existed && !results.is_empty() {
                true => client_calls(engine, &user, &session, results).await?,
                false => Vec::new(),
            };
            if answered.is_empty() {
                let tools = body.tools.unwrap_or_default();
                let files = shared::prompt_files(engine, &user, files).await?;
                let input = PromptInput {
                    text,
                    request_id: Some(request_id),
                    client_tools: tools,
                    files,
                    ..PromptInput::default()
                };
                (run_feed::prompt_chat(engine, &user, &session, input, connection).await?, None)
            } else {
                // The continuation: what follows the call's result (the fold leaves
                // out the result the client sent, `AgUiStream::given`).
                match decide_outputs(engine, &user, answered).await? {
                    Ok(approval) => (attach_after(engine, &user, &approval, connection).await?, None),
                    Err(refused) => return Ok(refused),
                }
            }
        }
        Action::Answer(answers) => {
            let (open, settled) = settled_apart(engine, &user, &session, answers).await?;
            let approval = match settled {
                Some(settled) if open.is_empty() => settled,
                _ => match ai_sdk::answer(engine, &user, &session, open, decision_key).await? {
                    Ok((approval, _)) => approval,
                    Err(refused) => return Ok(refused),
                },
            };
            let feed = attach_after(engine, &user, &approval, connection).await?;
            // The continuation opens with the decision. Read after deciding: the
            // decision as it was taken (a retry's first).
            let decided = engine.runs().approval(&user, &approval.id).await?;
            (feed, Some(ag_ui::resolved(&decided)))
        }
    };
    // The state is read after subscribing: anything that changes it later comes as a
    // `STATE_DELTA` in the stream.
    let detail = engine.sessions().get(&user, &session).await?;
    let mut feed = feed;
    let run = feed.dialect.run_id().clone();
    open(&mut feed, ag_ui::opening(&thread, &run, ag_ui::state_of(&session, &detail.state)), decision);
    feed.dialect.thread = thread;
    if cancel_on_drop {
        feed.dialect.guard =
            Some(CancelOnDrop { engine: engine.clone(), user: user.clone(), session, run, armed: true });
    }
    Ok(watched(run_feed::response(feed, &state, sse::EVENT_STREAM), watch))
}

/// Queues a stream's opening before everything else, then the decision a continuation
/// opens with: the opening numbered 1 and 2 when the stream numbers its events (nothing
/// is queued yet then: its events come from the frames), the decision unnumbered and
/// not counted (it comes in the opening's write; a re-attach does not send it again).
fn open(feed: &mut Feed, opening: Bytes, decision: Option<Bytes>) {
    if !feed.dialect.numbered {
        if let Some(decision) = decision {
            feed.push_front(decision);
        }
        feed.push_front(opening);
        return;
    }
    let mut ready = Ready::new();
    feed.dialect.queue(&opening, &mut ready);
    ready.extend(decision.map(|decision| (None, decision)));
    for (number, bytes) in ready {
        feed.push(number, bytes);
    }
}

#[derive(Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
struct EventsQuery {
    /// The `id` of the last event the client has (`Last-Event-ID` wins): `N`, the
    /// events of the run's stream from its start it has, or `<approval id>:N`, those of
    /// the continuation after that approval's interrupt.
    #[param(pattern = "^(per_[A-Za-z0-9]{26}:)?[0-9]{1,16}$")]
    after: Option<String>,
    /// The thread id `RUN_STARTED` and `RUN_FINISHED` name: the client's own (the run's
    /// `ses_…` session without one).
    #[param(pattern = "^[A-Za-z0-9_-]{1,128}$")]
    thread_id: Option<String>,
}

/// Re-attaches to a run, an AG-UI client's way back after its stream went away: the
/// run's AG-UI events numbered from its start as the prompt's stream numbered them
/// (`id: N`), from the one after `Last-Event-ID` (or `?after=N`) on, then live, to
/// `RUN_FINISHED` (outcome `success`, `interrupt` or `cancelled`) or `RUN_ERROR`; after
/// `<approval>:N`, the continuation after that approval's interrupt as the stream
/// answering it numbered it. A run whose frames neither the session's buffer nor its
/// frame log holds is drawn from the store, unnumbered (whole, or what follows the
/// interrupt).
#[utoipa::path(
    get,
    path = "/api/ag-ui/runs/{runId}/events",
    params(
        ("runId" = RunId, Path, description = "The `run_…` id `RUN_STARTED` carried"),
        ("Last-Event-ID" = Option<String>, Header, description = "The id of the last event the client has"),
        EventsQuery,
    ),
    responses(
        (status = 200, description = "The AG-UI event stream", content_type = "text/event-stream", body = AgUiStreamEvent),
        StreamErrors,
    )
)]
async fn run_events(
    State(state): State<AppState>,
    StreamCaller { user, connection, watch }: StreamCaller,
    PathId(id): PathId<RunId>,
    headers: HeaderMap,
    QueryParams(query): QueryParams<EventsQuery>,
) -> Result<Response, ApiError> {
    // A header that is no event id of this route's is not read; a query that is none
    // is refused.
    let header = sse::last_event_id(&headers).and_then(Cursor::parse);
    let asked = match query.after.as_deref() {
        Some(after) => Some(
            Cursor::parse(after)
                .ok_or_else(|| ApiError::bad_request("invalid_cursor", "an AG-UI event id is N or <approval id>:N"))?,
        ),
        None => None,
    };
    let cursor = header.or(asked).unwrap_or(Cursor::Start(0));
    checked_after(Some(cursor.number()))?;
    if let Some(thread) = &query.thread_id {
        check_thread_id(thread)?;
    }
    let engine = &state.engine;
    let run = engine.runs().get(&user, &id).await?;
    let thread = query.thread_id.unwrap_or_else(|| run.session_id.to_string());
    // Read before following: a change after it comes as a `STATE_DELTA` in the stream.
    let detail = engine.sessions().get(&user, &run.session_id).await?;
    let opening = ag_ui::opening(&thread, &run.id, ag_ui::state_of(&run.session_id, &detail.state));
    let (mut feed, after) = match cursor {
        Cursor::Start(after) => (reattach(engine, &user, &run, opening, after, connection).await?, after),
        Cursor::After(approval, after) => {
            (reattach_after(engine, &user, &run, &approval, opening, after, connection).await?, after)
        }
    };
    feed.dialect.thread = thread;
    Ok(watched(run_feed::response(feed.after(after), &state, sse::EVENT_STREAM), watch))
}

/// Where a re-attaching client is: after event N of the stream that followed the run
/// from its start, or after event N of the continuation after an approval's interrupt.
#[derive(Debug, PartialEq)]
enum Cursor {
    Start(u64),
    After(ApprovalId, u64),
}

impl Cursor {
    /// Reads an event id this module writes: `N` or `<approval id>:N`.
    fn parse(id: &str) -> Option<Self> {
        let (approval, number) = match id.rsplit_once(':') {
            Some((approval, number)) => (Some(approval.parse::<ApprovalId>().ok()?), number),
            None => (None, id),
        };
        if !number.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let number = number.parse().ok()?;
        Some(match approval {
            Some(approval) => Cursor::After(approval, number),
            None => Cursor::Start(number),
        })
    }

    /// How many events of its stream the client has.
    fn number(&self) -> u64 {
        match self {
            Cursor::Start(number) | Cursor::After(_, number) => *number,
        }
    }
}

/// Follows `run` from its start, numbered: from the session's buffer while it holds
/// the run's `run.accepted`, else from the run's frame log (joined to the live frames
/// while the run goes on), else drawn from a snapshot, unnumbered.
async fn reattach(
    engine: &Engine,
    user: &UserId,
    run: &Run,
    opening: Bytes,
    after: u64,
    kill: CancellationToken,
) -> Result<Feed, ApiError> {
    let (subscription, start) =
        engine.runs().subscribe(user, run, RunAfter::Seq(0), kill.clone(), AgUiEvents::VIEWER).await?;
    if let RunFrom::Replay(_) = start.from {
        let mut feed = Feed::from_start(subscription.typed(), run.id.clone());
        feed.push(None, opening);
        feed.dialect.reattaching(after);
        return Ok(feed);
    }
    // Let go first, so the log's subscription does not count twice against the limit.
    drop(subscription);
    if let Some(logged) = frame_log(engine, run, kill.clone()).await {
        // Folded from the run's `run.accepted` exactly as a live follower's.
        let fold = AgUiStream::new(run.id.clone());
        return Ok(from_log(logged, fold, None, run, opening, after));
    }
    let (subscription, start) = engine.runs().subscribe(user, run, RunAfter::Seq(0), kill, AgUiEvents::VIEWER).await?;
    let subscription = subscription.typed();
    let mut feed = match start.from {
        RunFrom::Replay(_) => {
            let mut feed = Feed::from_start(subscription, run.id.clone());
            feed.dialect.reattaching(after);
            feed
        }
        RunFrom::Snapshot(_) => run_feed::from_snapshot(engine, user, subscription, run.clone(), None).await?,
    };
    feed.push_front(opening);
    Ok(feed)
}

/// The run's frame log, joined to its live frames while it goes on; `None` when it has
/// none or the log cannot be read (said in the server's log), and the caller falls back.
async fn frame_log(engine: &Engine, run: &Run, kill: CancellationToken) -> Option<spool_engine::run_log::LoggedRun> {
    engine.follow_logged(run, kill, AgUiEvents::VIEWER).await.unwrap_or_else(|error| {
        tracing::warn!(run = %run.id, %error, "could not read the run's frame log");
        None
    })
}

/// A numbered re-attaching feed of `run` from its frame log, folded by `fold` from the
/// run's `run.accepted`: the events after `after` (of the stream from the run's start,
/// or of the continuation after `continues`), then live.
fn from_log(
    logged: spool_engine::run_log::LoggedRun,
    mut fold: AgUiStream,
    continues: Option<ApprovalId>,
    run: &Run,
    opening: Bytes,
    after: u64,
) -> Feed {
    let mut dialect = AgUiEvents { numbered: true, continues, run_id: Some(run.id.clone()), ..AgUiEvents::default() };
    dialect.reattaching(after);
    let mut ready = Ready::from([(None, opening)]);
    for frame in &logged.frames {
        let step = fold.map(frame);
        if dialect.step(&step, &mut ready).finished {
            break;
        }
    }
    let mut feed = Feed::new(logged.then.typed(), RunForm::Alone(shared::alone()), fold, dialect);
    for (number, bytes) in ready {
        feed.push(number, bytes);
    }
    feed
}

/// Follows the continuation after `approval`'s interrupt again, numbered as the stream
/// that answered it numbered it: from the session's buffer (as [`attach_after`]), else
/// from the run's frame log (its frames up to the request folded in silence), else the
/// continuation drawn from a snapshot, unnumbered. The decision the continuation opened
/// with is the client's already: not sent again.
async fn reattach_after(
    engine: &Engine,
    user: &UserId,
    run: &Run,
    approval: &ApprovalId,
    opening: Bytes,
    after: u64,
    kill: CancellationToken,
) -> Result<Feed, ApiError> {
    let approval = engine.runs().approval(user, approval).await?;
    if approval.run_id != run.id {
        return Err(ApiError::not_found("approval"));
    }
    let mut feed = attach_after(engine, user, &approval, kill.clone()).await?;
    if !feed.dialect.numbered {
        // Let go first, so the log's subscription does not count twice against the limit.
        drop(feed);
        if let Some(logged) = frame_log(engine, run, kill.clone()).await {
            let fold = AgUiStream::muted_until(&approval, None);
            return Ok(from_log(logged, fold, Some(approval.id.clone()), run, opening, after));
        }
        feed = attach_after(engine, user, &approval, kill).await?;
    }
    feed.push_front(opening);
    if feed.dialect.numbered {
        feed.dialect.reattaching(after);
    }
    Ok(feed)
}

/// The client calls of `session` that `results` answer: each still waiting, with its
/// result. A result for a call that waits for nothing (answered before, a call of
/// Spool's own tools the client was shown) is left out.
async fn client_calls(
    engine: &Engine,
    user: &UserId,
    session: &SessionId,
    results: Vec<ToolResult>,
) -> Result<Vec<(Approval, ClientOutput)>, ApiError> {
    let pending = engine.runs().pending_approvals(user).await?;
    let waiting =
        |call: &str| pending.iter().find(|a| &a.session_id == session && a.is_client_call() && a.tool_call_id == call);
    let answered: Vec<_> =
        results.into_iter().filter_map(|r| waiting(&r.call).map(|a| (a.clone(), r.output))).collect();
    if answered.len() > MAX_ANSWERS {
        return Err(ApiError::bad_request(
            "too_many_answers",
            format!("at most {MAX_ANSWERS} tool results per request"),
        ));
    }
    Ok(answered)
}

/// A client call's result's idempotency key: the approval and a digest of the result,
/// so the same result again (a retried request) gets the first response and another
/// finds the call answered (409).
fn output_key(approval: &ApprovalId, output: &ClientOutput) -> String {
    format!("{DIALECT}:{approval}:output:{}", shared::output_digest(output))
}

/// Decides each client call with its result; `Ok(approval)` is the last one decided
/// (the continuation follows it), `Err(response)` the engine's JSON refusal when none
/// was (expired, answered differently, too large).
async fn decide_outputs(
    engine: &Engine,
    user: &UserId,
    answered: Vec<(Approval, ClientOutput)>,
) -> Result<Result<Approval, Response>, ApiError> {
    let (mut last, mut refusal) = (None, None);
    for (approval, output) in answered {
        let idempotency_key = Some(output_key(&approval.id, &output));
        let input = DecisionInput {
            decision: Decision::Output(output),
            message: None,
            idempotency_key,
            patterns: None,
            via: None,
        };
        let target = DecisionTarget::Run(approval.run_id.clone());
        match engine.runs().decide(user, target, &approval.id, input).await {
            Ok(DecisionOutcome::Applied { .. } | DecisionOutcome::ResourceChanged { .. }) => last = Some(approval),
            Ok(outcome) => refusal = Some(crate::http::decision::decision_response(&outcome)),
            Err(e) => refusal = Some(ApiError::from(e).into_response()),
        }
    }
    match (last, refusal) {
        (Some(approval), _) => Ok(Ok(approval)),
        (None, Some(refusal)) => Ok(Err(refusal)),
        (None, None) => unreachable!("client_calls gives at least one call"),
    }
}

/// Sets apart the abandoned interrupts (`cancelled`) whose approvals were settled
/// meanwhile — expired, decided through Spool's own routes, cancelled with their run:
/// nothing is left to decide there, and the stream shows the run from that interrupt
/// on. Returns the answers still to apply and the first such approval.
async fn settled_apart(
    engine: &Engine,
    user: &UserId,
    session: &SessionId,
    answers: Vec<(Answer, bool)>,
) -> Result<(Vec<Answer>, Option<Approval>), ApiError> {
    let (mut open, mut settled) = (Vec::new(), None);
    for (answer, abandons) in answers {
        if abandons {
            let found = engine.runs().approval(user, &answer.approval).await?;
            if &found.session_id != session {
                return Err(ApiError::not_found("approval"));
            }
            if found.status != ApprovalStatus::Pending {
                settled.get_or_insert(found);
                continue;
            }
        }
        open.push(answer);
    }
    Ok((open, settled))
}

/// Follows `approval`'s run from the frame after its request: the continuation of the
/// run the client holds up to its interrupt.
async fn attach_after(
    engine: &Engine,
    user: &UserId,
    approval: &Approval,
    kill: CancellationToken,
) -> Result<Feed, ApiError> {
    let AfterInterrupt { run, subscription, waiting, from } =
        run_feed::subscribe_after(engine, user, approval, kill, AgUiEvents::VIEWER).await?;
    let waiting = match &waiting {
        Some(id) => Some(engine.runs().approval(user, id).await?),
        None => None,
    };
    let (form, fold) = match from {
        Continuation::AfterRequest => (AgUiForm::After(approval.id.clone()), AgUiStream::continuing(approval, waiting)),
        Continuation::RunStart => (AgUiForm::Muted(approval.id.clone()), AgUiStream::muted_until(approval, waiting)),
        // What follows the interrupt drawn as the snapshot shows it.
        Continuation::Snapshot => {
            return run_feed::from_snapshot(engine, user, subscription, run, Some(approval)).await;
        }
    };
    // Numbered `<approval>:N`, the same in every such stream: the continuation is the
    // same fold of the same frames after the request.
    let dialect = AgUiEvents { numbered: true, continues: Some(approval.id.clone()), ..AgUiEvents::default() };
    Ok(Feed::new(subscription, form, fold, dialect))
}

/// AG-UI draws the run after `after`'s interrupt, or all of it.
impl ChatDialect for AgUiEvents {
    fn from_snapshot(from: &FromSnapshot, after: Option<&Approval>) -> (AgUiStream, Self, Vec<Bytes>) {
        let (fold, events) = AgUiStream::from_snapshot(&from.run, from.state(), &from.messages, after);
        (fold, AgUiEvents::default(), events.iter().map(AgUiEvent::to_sse).collect())
    }
}

/// AG-UI as a [`RunDialect`]: the run's events, and last `RUN_FINISHED` with its
/// outcome (the interrupt it waits at) or `RUN_ERROR`.
#[derive(Default)]
struct AgUiEvents {
    thread: String,
    waiting: Option<Approval>,
    ended: Option<RunStatus>,
    error: Option<RunError>,
    run_id: Option<RunId>,
    /// Cancels the run when the body goes before its last event was written (asked
    /// for with `forwardedProps.onDisconnect: "cancel"`).
    guard: Option<CancelOnDrop>,
    /// The stream follows the run from its start: its events are numbered (`id: N`),
    /// the same in every such stream of the run, so a client re-attaches after the
    /// last it has.
    numbered: bool,
    /// The stream is the continuation after this approval's interrupt: its events are
    /// numbered `<approval>:N`, counted from the continuation's own opening.
    continues: Option<ApprovalId>,
    /// Events numbered so far.
    count: u64,
    /// A re-attaching stream: the client has the events up to this number, which are
    /// not written, but what they left open (a message, a tool call, reasoning) is
    /// opened again, unnumbered, before the first event after them.
    cut: u64,
    /// The `*_START` events (as encoded, keyed by kind and id) of what is open at the
    /// last event up to `cut`.
    open: Vec<(String, Bytes)>,
}

impl RunDialect for AgUiEvents {
    type Key = AgUiForm;
    type Fold = AgUiStream;
    /// An AG-UI client answers the run's interrupts (`resume`).
    const VIEWER: Viewer = Viewer { kind: ClientKind::AgUi, answers: true };

    fn from_start(run: RunId) -> (AgUiForm, AgUiStream, Self) {
        (AgUiForm::Run(run.clone()), AgUiStream::new(run), AgUiEvents { numbered: true, ..AgUiEvents::default() })
    }

    fn forms(forms: &RunForms) -> &Forms<AgUiForm, AgUiStream> {
        &forms.ag_ui
    }

    fn start(&mut self, fold: &AgUiStream) -> Place {
        self.run_id = Some(fold.run_id().clone());
        (self.waiting, self.ended) = (fold.waiting().cloned(), fold.ended());
        if let Some(Close::Failed(error)) = fold.close() {
            self.error = error;
        }
        self.place()
    }

    fn step(&mut self, step: &ag_ui::Step, ready: &mut Ready) -> Place {
        if !step.bytes.is_empty() {
            self.queue(&step.bytes, ready);
        }
        // Unnumbered and not counted; a re-attaching stream sends only what came after
        // the client's last event.
        if let Some(presence) = &step.presence
            && self.count >= self.cut
        {
            ready.push_back((None, presence.clone()));
        }
        self.waiting = step.waiting.clone();
        self.ended = step.ended;
        self.error = step.error.clone();
        self.place()
    }

    fn close(&mut self, _: Place, ready: &mut Ready) {
        let close = match (self.ended, self.waiting.take()) {
            (Some(RunStatus::Completed), _) => Close::Completed,
            (Some(RunStatus::Cancelled), _) => Close::Cancelled,
            (Some(_), _) => Close::Failed(self.error.take()),
            (None, Some(approval)) => Close::parked(approval),
            // Not reached: a stream closes only once the run ended or waits.
            (None, None) => Close::Failed(None),
        };
        let closing = ag_ui::closing(&self.thread, self.run_id(), close);
        self.queue(&closing, ready);
    }

    fn ended(&mut self) {
        if let Some(guard) = &mut self.guard {
            guard.armed = false;
        }
    }
}

impl AgUiEvents {
    fn place(&self) -> Place {
        Place { waiting: self.waiting.is_some(), finished: self.ended.is_some() }
    }

    fn run_id(&self) -> &RunId {
        self.run_id.as_ref().expect("start() names the run before any step")
    }

    /// A re-attaching stream: its opening (`RUN_STARTED`, `STATE_SNAPSHOT`) is its
    /// own, unnumbered, in place of the first two; the client has the events up to
    /// `after`.
    fn reattaching(&mut self, after: u64) {
        self.count = OPENING_EVENTS;
        self.cut = after;
    }

    /// Queues encoded events: as they are, or numbered one by one (`id: N` before each
    /// event's `data:` line, which holds JSON without a raw newline, so a blank line
    /// ends each event).
    fn queue(&mut self, bytes: &Bytes, ready: &mut Ready) {
        if !self.numbered {
            ready.push_back((None, bytes.clone()));
            return;
        }
        let mut rest = &bytes[..];
        while !rest.is_empty() {
            let end = rest.windows(2).position(|w| w == b"\n\n").map_or(rest.len(), |at| at + 2);
            let block = &rest[..end];
            rest = &rest[end..];
            self.count += 1;
            if self.count <= self.cut {
                self.note_open(block);
                continue;
            }
            // AG-UI clients check that what a content event continues was started in the
            // same stream.
            ready.extend(self.open.drain(..).map(|(_, start)| (None, start)));
            let mut event = match &self.continues {
                Some(approval) => format!("id: {approval}:{}\n", self.count),
                None => format!("id: {}\n", self.count),
            }
            .into_bytes();
            event.extend_from_slice(block);
            ready.push_back((Some(self.count), Bytes::from(event)));
        }
    }

    /// Keeps what an event the client has opens, and forgets what it closes.
    fn note_open(&mut self, block: &[u8]) {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Part {
            r#type: String,
            message_id: Option<String>,
            tool_call_id: Option<String>,
        }
        let json = block.strip_prefix(b"data: ").unwrap_or(block);
        let Ok(Part { r#type, message_id, tool_call_id }) = serde_json::from_slice::<Part>(json.trim_ascii_end())
        else {
            return;
        };
        let Some(id) = tool_call_id.or(message_id) else { return };
        if let Some(kind) = r#type.strip_suffix("_START") {
            self.open.push((format!("{kind}:{id}"), Bytes::copy_from_slice(block)));
        } else if let Some(kind) = r#type.strip_suffix("_END") {
            let key = format!("{kind}:{id}");
            self.open.retain(|(k, _)| *k != key);
        }
    }
}

type Feed = RunFeed<AgUiEvents>;

/// The events of a stream's opening: `RUN_STARTED` and `STATE_SNAPSHOT`.
const OPENING_EVENTS: u64 = 2;

/// Aborts the run when the body goes before the stream's last event was queued, for a
/// request that asked so (`forwardedProps.onDisconnect: "cancel"`; see the module docs).
struct CancelOnDrop {
    engine: Engine,
    user: UserId,
    session: SessionId,
    run: RunId,
    armed: bool,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let (engine, user, session, run) =
            (self.engine.clone(), self.user.clone(), self.session.clone(), self.run.clone());
        runtime.spawn(async move {
            // Only this stream's run: the session may have moved on to another one.
            let active = match engine.sessions().get(&user, &session).await {
                Ok(detail) => detail.state.active_run.is_some_and(|a| a.run_id == run),
                Err(_) => false,
            };
            if active && let Err(error) = engine.runs().abort(&user, &session).await {
                tracing::warn!(%run, %error, "could not cancel the run of an aborted AG-UI request");
            }
        });
    }
}

/// The body this module reads, parsed and checked as its handler does.
pub(crate) const BODIES: &[(&str, BodyCheck)] = &[("POST /api/ag-ui", |b| {
    let input = json_body::<RunAgentInput>(b)?;
    check_thread_id(&input.thread_id)?;
    input.action().map(drop)
})];
