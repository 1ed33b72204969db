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
//!   `tools`, `context` and `state` are accepted and not used: Spool's tools are its
//!   own, and its state is what `STATE_SNAPSHOT` sends.
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
//! * Aborting the request (`agent.abortRun()`) before the stream's end cancels the run:
//!   AG-UI has no other way to stop one, and `HttpAgent` cannot reattach to a run it
//!   left. So does a stream the server cuts (a client too slow to read, a revoked
//!   token): its client cannot come back to the run either. A stream that ended
//!   (finished, failed, or parked at an approval) cancels nothing.

use crate::dialect::RunForms;
use crate::dialect::ag_ui::{self, AgUiEvent, AgUiForm, AgUiStream, Close};
use crate::dialect::ai_sdk::routes::{self as ai_sdk, Answer, DENIED, MAX_ANSWERS, Reply};
use crate::dialect::shared::Forms;
use crate::error::ApiError;
use crate::extract::BodyCheck;
use crate::extract::{JsonBody, json_body};
use crate::http::responses::WriteErrors;
use crate::http::run_feed::{
    self, AfterInterrupt, ChatDialect, Continuation, FromSnapshot, Place, Ready, RunDialect, RunFeed,
};
use crate::http::sse;
use crate::http::stream_events::AgUiStreamEvent;
use crate::revocation::{StreamCaller, watched};
use crate::state::AppState;
use axum::extract::State;
use axum::response::Response;
use bytes::Bytes;
use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha256};
use spool_engine::{Engine, EngineError};
use spool_protocol::{Approval, ApprovalId, ApprovalStatus, RunError, RunId, RunStatus, SessionId, UserId};
use tokio_util::sync::CancellationToken;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(run_agent))
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
    /// Accepted, not used: Spool's tools are its own.
    #[serde(default)]
    #[schema(value_type = Option<Vec<Object>>)]
    #[allow(dead_code)]
    tools: Value,
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
/// parts of which `text` parts count.
#[derive(Deserialize, ToSchema)]
struct AgUiMessage {
    id: String,
    /// `user`, `assistant`, `system`, `developer`, `tool`, `reasoning` or `activity`.
    role: String,
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    content: Value,
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
    Prompt {
        text: String,
        request_id: String,
    },
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
        let text = match &last.content {
            Value::String(text) => text.clone(),
            Value::Array(parts) => {
                let texts: Vec<&str> =
                    parts.iter().filter(|p| p["type"] == "text").filter_map(|p| p["text"].as_str()).collect();
                texts.join("\n")
            }
            _ => String::new(),
        };
        if text.trim().is_empty() {
            return Err(EngineError::invalid("empty_prompt", "the last user message has no text").into());
        }
        Ok(Action::Prompt { text, request_id: format!("{DIALECT}:{}", last.id) })
    }
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
/// `interrupt` or `cancelled`) or `RUN_ERROR`.
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
    let project = body.forwarded_props["projectId"].as_str();
    let missing = "this thread has no session yet: send forwardedProps.projectId to start one";
    let session = ai_sdk::session_or_new(engine, &user, &body.thread_id, named, project, missing).await?;
    let thread = body.thread_id.clone();
    let feed = match action {
        Action::Prompt { text, request_id } => {
            run_feed::prompt_chat(engine, &user, &session, text, Some(request_id), connection).await?
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
            let mut feed = attach_after(engine, &user, &approval, connection).await?;
            // The continuation opens with the decision. Read after deciding: the
            // decision as it was taken (a retry's first).
            let decided = engine.runs().approval(&user, &approval.id).await?;
            feed.push_front(ag_ui::resolved(&decided));
            feed
        }
    };
    // The state is read after subscribing: anything that changes it later comes as a
    // `STATE_DELTA` in the stream.
    let detail = engine.sessions().get(&user, &session).await?;
    let mut feed = feed;
    let run = feed.dialect.run_id().clone();
    feed.push_front(ag_ui::opening(&thread, &run, ag_ui::state_of(&session, &detail.state)));
    feed.dialect.thread = thread;
    feed.dialect.guard = Some(CancelOnDrop { engine: engine.clone(), user: user.clone(), session, run, armed: true });
    Ok(watched(run_feed::response(feed, &state, sse::EVENT_STREAM), watch))
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
        run_feed::subscribe_after(engine, user, approval, kill).await?;
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
    Ok(Feed::new(subscription, form, fold, AgUiEvents::default()))
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
    /// Cancels the run when the body goes before its last event was written.
    guard: Option<CancelOnDrop>,
}

impl RunDialect for AgUiEvents {
    type Key = AgUiForm;
    type Fold = AgUiStream;

    fn from_start(run: RunId) -> (AgUiForm, AgUiStream, Self) {
        (AgUiForm::Run(run.clone()), AgUiStream::new(run), AgUiEvents::default())
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
            ready.push_back((None, step.bytes.clone()));
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
            (None, Some(approval)) => Close::Waiting(vec![approval]),
            // Not reached: a stream closes only once the run ended or waits.
            (None, None) => Close::Failed(None),
        };
        ready.push_back((None, ag_ui::closing(&self.thread, self.run_id(), close)));
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
}

type Feed = RunFeed<AgUiEvents>;

/// Aborts the run when the body goes before the stream's last event was queued: the
/// client aborted the request (see the module docs).
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
