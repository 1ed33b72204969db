//! The run stream (seed 003): `POST /api/chat` starts a run and streams it as
//! `event: <type>` / `data: <json>` SSE, `GET /api/runs/:id/events?after=N` re-attaches
//! to a run, and [`resume_stream`] answers a decision with the continuation. The
//! mapping from native frames is `dialect::run_stream`; this file only feeds it.
//!
//! # Following one run inside a session stream
//!
//! * `POST /api/chat` subscribes to the session *before* prompting, so the run's
//!   `run.accepted` and everything after it are in the subscription.
//! * A re-attach (a retried POST, `GET …/events`, a resume) continues the run's own
//!   numbering, which the engine keeps for the run's lifetime. It asks the engine for
//!   one subscription positioned at the frame of the client's last event
//!   ([`spool_engine::Runs::subscribe`]) and folds on from there. When the frames after it
//!   have left the buffer, the run's frame log replays them, folded from the run's
//!   `run.accepted` as a live follower's: the whole run, or while it goes on (on this
//!   node or another) the frames logged so far and then the live ones right after them
//!   ([`Engine::follow_logged`]). Without a log that can do that, the subscription starts
//!   with a session snapshot: one `snapshot` event (status, text so far, tool calls) at
//!   the run's current sequence, then live.
//! * Frames go through the run's shared form (`AppState::forms`): each is mapped and encoded
//!   once per run, and every stream of the run takes the same bytes from there.
//! * The stream ends after `done` or `error`, and after an `interrupt` still waiting
//!   once the stream has caught up with the live frames (so a replay through an
//!   interrupt that was since decided goes on). `: keep-alive` comments fill silences.
//!
//! Like the native stream, the subscription's kill token is the connection's, so a
//! client that stops reading is cut and dropped; closing the stream never cancels the
//! run unless the prompt said `onDisconnect: "cancel"`.

use crate::dialect::RunForms;
use crate::dialect::run_stream::{self, Numbering, RunForm, RunStream};
use crate::dialect::shared::{self, FormMapper, Forms};
use crate::error::ApiError;
use crate::extract::BodyCheck;
use crate::extract::{JsonBody, PathId, QueryParams, json_body};
use crate::http::responses::{StreamErrors, WriteErrors};
use crate::http::run_feed::{self, FromSnapshot, Place, Prompted, Ready, RunDialect, RunFeed};
use crate::http::sse;
use crate::http::stream_events::RunStreamEvent;
use crate::revocation::{StreamCaller, watched};
use crate::state::AppState;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::http::header::ACCEPT;
use axum::response::Response;
use serde::Deserialize;
use spool_engine::{
    ApprovalPolicy, DecisionInput, DecisionOutcome, DecisionTarget, Engine, EngineError, Multitask, OnDisconnect,
    PromptInput, RunAfter, RunFrom,
};
use spool_protocol::{ApprovalId, ProjectId, Run, RunId, SessionId, UserId};
use spool_engine::Viewer;
use spool_protocol::ClientKind;
use tokio_util::sync::CancellationToken;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(chat)).routes(routes!(events))
}

/// Seed 003's chat body: a session to continue, or a project to start a session in.
#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct ChatBody {
    /// The `ses_…` session to continue.
    session_id: Option<String>,
    /// Without a session: the `prj_…` project to start a new session in.
    project_id: Option<String>,
    text: String,
    /// The same requestId again follows the run it started instead of starting one.
    request_id: Option<String>,
    approval_policy: Option<ApprovalPolicy>,
    #[serde(default)]
    on_disconnect: OnDisconnect,
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct AfterQuery {
    /// The last sequence the client has (`Last-Event-ID` wins).
    #[param(maximum = 9007199254740991.0)]
    after: Option<u64>,
}

/// The largest run-stream sequence: the largest integer a JavaScript client holds
/// exactly. No run gets near it, so an `after` above it was never sent by this server;
/// taken as is, counting on from it (a snapshot is numbered `after + 1`) could overflow.
pub(crate) const MAX_SEQUENCE: u64 = (1 << 53) - 1;

/// A client's `after`, refused when it is past any sequence a run can have.
pub(crate) fn checked_after(after: Option<u64>) -> Result<Option<u64>, ApiError> {
    match after {
        Some(n) if n > MAX_SEQUENCE => {
            Err(ApiError::bad_request("invalid_cursor", format!("a run-stream sequence is at most {MAX_SEQUENCE}")))
        }
        other => Ok(other),
    }
}

/// Starts a run (or follows the one this `requestId` started) and streams it: SSE
/// `event: <type>` / `data: <json>` with `run_started`, `text_delta`, `tool_started`,
/// `tool_finished`, `interrupt`, `done` and `error`. The stream ends after `done`,
/// `error`, or an `interrupt` that waits for a decision (`POST /api/runs/{id}/resume`).
#[utoipa::path(
    post,
    path = "/api/chat",
    request_body = ChatBody,
    responses(
        (status = 200, description = "The run stream", content_type = "text/event-stream", body = RunStreamEvent),
        WriteErrors,
    )
)]
async fn chat(
    State(state): State<AppState>,
    StreamCaller { user, connection, watch }: StreamCaller,
    JsonBody(body): JsonBody<ChatBody>,
) -> Result<Response, ApiError> {
    let engine = &state.engine;
    let (session, created) = match body.target()? {
        ChatTarget::Session(id) => (id, false),
        ChatTarget::NewSessionIn(project) => (engine.sessions().create(&user, &project, None).await?.id, true),
    };
    let input = PromptInput {
        text: body.text,
        request_id: body.request_id,
        approval_policy: body.approval_policy,
        on_disconnect: body.on_disconnect,
        multitask: Multitask::Reject,
        ..PromptInput::default()
    };
    let prompted = match run_feed::prompt(engine, &user, &session, input, &connection).await {
        Ok(prompted) => prompted,
        Err(e) => {
            if created && let Err(cleanup) = engine.sessions().delete(&user, &session).await {
                tracing::warn!(%session, error = %cleanup, "could not remove the session of a refused chat");
            }
            return Err(e.into());
        }
    };
    let feed = match prompted {
        Prompted::New(feed) => feed,
        // A retried POST: follow the run its requestId already started, from the start
        // (a client that has some of it drops what it has: the numbers are the run's).
        Prompted::Retried(run) => {
            let run = engine.runs().get(&user, &run).await?;
            attach(engine, &user, run, RunAfter::Seq(0), connection).await?
        }
    };
    Ok(watched(run_feed::response(feed, &state, sse::EVENT_STREAM_UTF8), watch))
}

/// `GET /api/runs/:id/events?after=N` (or `Last-Event-ID: N`, which wins, as on the
/// native stream): the run's events after sequence N, then live.
#[utoipa::path(
    get,
    path = "/api/runs/{id}/events",
    params(
        ("id" = RunId, Path),
        ("Last-Event-ID" = Option<String>, Header, description = "The last sequence the client has"),
        AfterQuery,
    ),
    responses(
        (status = 200, description = "The run stream", content_type = "text/event-stream", body = RunStreamEvent),
        StreamErrors,
    )
)]
async fn events(
    State(state): State<AppState>,
    StreamCaller { user, connection, watch }: StreamCaller,
    PathId(id): PathId<RunId>,
    headers: HeaderMap,
    QueryParams(query): QueryParams<AfterQuery>,
) -> Result<Response, ApiError> {
    let header = sse::last_event_id(&headers).and_then(|v| v.parse().ok());
    let after = checked_after(header.or(query.after))?.unwrap_or(0);
    let run = state.engine.runs().get(&user, &id).await?;
    let feed = attach(&state.engine, &user, run, RunAfter::Seq(after), connection).await?;
    Ok(watched(run_feed::response(feed, &state, sse::EVENT_STREAM_UTF8), watch))
}

/// Whether a request asked for an event stream (`Accept: text/event-stream`).
pub(crate) fn wants_event_stream(headers: &HeaderMap) -> bool {
    headers.get_all(ACCEPT).iter().filter_map(|v| v.to_str().ok()).any(|v| v.contains(sse::EVENT_STREAM))
}

/// `POST /api/runs/:id/resume` with `Accept: text/event-stream`: applies the decision
/// and answers with the run stream's continuation — the events after the decided
/// interrupt (or after `after`, when the client says), to the next `interrupt`,
/// `done` or `error`. A decision the engine refuses (or answers from an idempotency
/// record with an error) is answered as JSON, exactly as without the header.
pub(crate) async fn resume_stream(
    state: &AppState,
    user: &UserId,
    run_id: RunId,
    approval: ApprovalId,
    input: DecisionInput,
    after: Option<u64>,
    connection: CancellationToken,
) -> Result<Response, ApiError> {
    // Checked before deciding: a refused request must change nothing.
    let after = checked_after(after)?;
    let outcome = state.engine.runs().decide(user, DecisionTarget::Run(run_id.clone()), &approval, input).await?;
    if !matches!(outcome, DecisionOutcome::Applied { .. }) {
        return Ok(crate::http::decision::decision_response(&outcome));
    }
    let run = state.engine.runs().get(user, &run_id).await?;
    let after = after.map_or(RunAfter::Interrupt(approval), RunAfter::Seq);
    let feed = attach(&state.engine, user, run, after, connection).await?;
    Ok(run_feed::response(feed, state, sse::EVENT_STREAM_UTF8))
}

/// Follows `run` after the client's last event: from that event's frame while the
/// session's buffer holds what follows it, else from the run's frame log (joined to the
/// live frames while the run goes on), else from a snapshot. See the module docs.
async fn attach(
    engine: &Engine,
    user: &UserId,
    run: Run,
    after: RunAfter,
    kill: CancellationToken,
) -> Result<Feed, ApiError> {
    let (subscription, start) = engine.runs().subscribe(user, &run, after.clone(), kill.clone(), RunEvents::VIEWER).await?;
    if let RunFrom::Replay(count) = start.from {
        return Ok(replayed(subscription.typed(), &run, count, start.waiting, start.after));
    }
    // The frames after `after` left the buffer (or the server restarted, or another node
    // ran the run): its frame log replays them exactly. The snapshot's subscription is
    // let go first, so the log's does not count twice against the stream limit.
    drop(subscription);
    if let Some(feed) = from_log(engine, &run, start.after, kill.clone()).await {
        return Ok(feed);
    }
    let (subscription, start) = engine.runs().subscribe(user, &run, after, kill, RunEvents::VIEWER).await?;
    let mut subscription = subscription.typed();
    let count = match start.from {
        RunFrom::Replay(count) => return Ok(replayed(subscription, &run, count, start.waiting, start.after)),
        RunFrom::Snapshot(count) => count,
    };
    let from = FromSnapshot::read(engine, user, &mut subscription, &run).await?;
    // A client whose last sequence is past the run's numbers it from elsewhere (a
    // stream before a restart): it keeps its own numbering, from a snapshot.
    let numbering = match count {
        Some(count) if count.sequence() >= start.after => Numbering::Run(count),
        _ => Numbering::After(start.after),
    };
    let form = RunForm::of(&run.id, &numbering);
    let (fold, events) = RunStream::from_snapshot(&from.run, from.state(), &from.messages, numbering);
    let mut feed = Feed::new(subscription, form, fold, RunEvents).after(start.after);
    for event in events {
        feed.push(Some(event.sequence), event.to_sse());
    }
    Ok(feed)
}

/// A feed replaying the session's buffer from the frame of the client's last event.
fn replayed(
    subscription: spool_engine::TypedSubscription,
    run: &Run,
    count: spool_engine::RunCount,
    waiting: Option<ApprovalId>,
    after: u64,
) -> Feed {
    let fold = RunStream::resume(count, waiting);
    Feed::new(subscription, RunForm::Run(run.id.clone()), fold, RunEvents).after(after)
}

/// The run's events from its frame log, folded from its `run.accepted` exactly as a
/// live follower's, every event after `after` ready to write. A whole log ends the
/// feed with the run; one still being written goes on live right after its last frame
/// (the engine joined them: nothing missing, nothing twice). `None` (a snapshot then)
/// when there is no log, it cannot join the live frames, or, for a whole log, `after`
/// is not below its last event (a client numbering the run from elsewhere).
async fn from_log(engine: &Engine, run: &Run, after: u64, kill: CancellationToken) -> Option<Feed> {
    let logged = match engine.follow_logged(run, kill, RunEvents::VIEWER).await {
        Ok(logged) => logged?,
        Err(error) => {
            tracing::warn!(run = %run.id, %error, "could not read the run's frame log");
            return None;
        }
    };
    let mut fold = RunStream::new(run.id.clone());
    let mut events = Vec::new();
    // The sequence of the run's last event so far.
    let mut last = 0;
    for frame in &logged.frames {
        let step = fold.map(frame);
        if let Some((sequence, bytes)) = step.event {
            last = sequence;
            events.push((Some(sequence), bytes));
        }
        // Presence that came before the client's last event is not sent again.
        if let Some(presence) = step.presence
            && last >= after
        {
            events.push((None, presence));
        }
        if step.finished {
            break;
        }
    }
    // The feed ends with the fold, before it reads the subscription.
    if logged.whole && (!fold.finished() || after >= last) {
        return None;
    }
    let subscription = logged.then.typed();
    Some(Feed::new(subscription, RunForm::Alone(shared::alone()), fold, RunEvents).after(after).ready(events))
}

/// The run stream as a [`RunDialect`]: events numbered by the run, nothing after the
/// last (`done`, `error`, or an `interrupt` that waits).
struct RunEvents;

impl RunDialect for RunEvents {
    type Key = RunForm;
    type Fold = RunStream;
    /// A run-stream client answers the run's `interrupt` (`POST /api/runs/{id}/resume`).
    const VIEWER: Viewer = Viewer { kind: ClientKind::Other, answers: true };

    fn from_start(run: RunId) -> (RunForm, RunStream, Self) {
        (RunForm::Run(run.clone()), RunStream::new(run), RunEvents)
    }

    fn forms(forms: &RunForms) -> &Forms<RunForm, RunStream> {
        &forms.run_stream
    }

    fn start(&mut self, fold: &RunStream) -> Place {
        Place { waiting: fold.waiting().is_some(), finished: fold.finished() }
    }

    fn step(&mut self, step: &run_stream::Step, ready: &mut Ready) -> Place {
        ready.extend(step.event.clone().map(|(sequence, bytes)| (Some(sequence), bytes)));
        // Unnumbered: written whatever the client's `after`, which it never moves.
        ready.extend(step.presence.clone().map(|bytes| (None, bytes)));
        Place { waiting: step.waiting, finished: step.finished }
    }

    fn close(&mut self, _: Place, _: &mut Ready) {}
}

type Feed = RunFeed<RunEvents>;

/// Where a chat body's prompt goes.
enum ChatTarget {
    Session(SessionId),
    NewSessionIn(ProjectId),
}

impl ChatBody {
    fn target(&self) -> Result<ChatTarget, ApiError> {
        match (&self.session_id, &self.project_id) {
            (Some(id), _) => Ok(ChatTarget::Session(id.parse().map_err(|_| ApiError::not_found("session"))?)),
            (None, Some(project)) => {
                // Checked here too so a prompt the engine would refuse leaves no empty session.
                if self.text.trim().is_empty() {
                    return Err(EngineError::invalid("empty_prompt", "the prompt text is empty").into());
                }
                Ok(ChatTarget::NewSessionIn(project.parse().map_err(|_| ApiError::not_found("project"))?))
            }
            (None, None) => {
                Err(ApiError::bad_request("missing_session", "send a sessionId, or a projectId to start a new session"))
            }
        }
    }
}

/// The body this module reads, parsed and checked as its handler does.
pub(crate) const BODIES: &[(&str, BodyCheck)] = &[("POST /api/chat", |b| json_body::<ChatBody>(b)?.target().map(drop))];

#[cfg(test)]
mod tests {
    //! The run stream and its resume continuation (`POST /api/runs/:id/resume` with
    //! `Accept: text/event-stream`), through the whole API on a real port.

    use super::*;
    use futures::StreamExt;
    use serde_json::{Value, json};
    use spool_engine::{EngineConfig, Models};
    use spool_protocol::RunStatus;
    use spool_protocol::sse::Decoder;
    use std::sync::Arc;
    use std::time::Duration;

    struct Server {
        base: String,
        engine: Engine,
        project: ProjectId,
        dir: tempfile::TempDir,
        _shutdown: tokio_util::sync::DropGuard,
    }

    async fn server() -> Server {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir_all(dir.path().join("project")).expect("project dir");
        let store = Arc::new(spool_store::SqliteStore::open(&dir.path().join("spool.db")).await.expect("store"));
        let models = Models::new(Arc::new(spool_model::ScriptedModel::new(Duration::ZERO)));
        let engine = Engine::start(store, models, spool_tools::workspace_tools(), EngineConfig::default())
            .await
            .expect("engine");
        let user = engine.local_user().clone();
        let path = dir.path().join("project");
        let project = engine.projects().create(&user, path.to_str().expect("utf-8"), None).await.expect("project").id;
        let state = AppState::new(engine.clone(), crate::ServerConfig::default());
        let app = crate::http::router(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("address"));
        let shutdown = CancellationToken::new();
        tokio::spawn(crate::serve(listener, app, shutdown.clone()));
        Server { base, engine, project, dir, _shutdown: shutdown.drop_guard() }
    }

    /// Reads a run stream to its end: (event type, data) pairs.
    async fn read_all(res: reqwest::Response) -> Vec<(String, Value)> {
        assert_eq!(res.status(), 200);
        assert_eq!(res.headers()["content-type"], "text/event-stream; charset=utf-8");
        let mut body = res.bytes_stream();
        let mut decoder = Decoder::new();
        let mut out = Vec::new();
        let read = async {
            while let Some(chunk) = body.next().await {
                for ev in decoder.push(&chunk.expect("chunk")) {
                    let data: Value = serde_json::from_str(&ev.data).expect("json");
                    assert_eq!(ev.id.as_deref(), Some(data["sequence"].to_string().as_str()));
                    out.push((ev.event.expect("named event"), data));
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(15), read).await.expect("the stream ends");
        out
    }

    /// Found by schemathesis: `after` near `u64::MAX` overflowed numbering the snapshot.
    #[tokio::test]
    async fn an_after_past_any_sequence_is_a_400_not_a_panic() {
        let server = server().await;
        let client = reqwest::Client::builder().no_proxy().build().expect("client");
        let res = client
            .post(format!("{}/api/chat", server.base))
            .json(&json!({"projectId": server.project, "text": "hello"}))
            .send()
            .await
            .expect("chat");
        let events = read_all(res).await;
        let run_id = events[0].1["runId"].as_str().expect("runId").to_owned();
        let url = format!("{}/api/runs/{run_id}/events", server.base);
        for after in [u64::MAX, MAX_SEQUENCE + 1] {
            let res = client.get(format!("{url}?after={after}")).send().await.expect("events");
            assert_eq!(res.status(), 400, "after={after}");
            let body: Value = res.json().await.expect("JSON error");
            assert_eq!(body["error"]["code"], "invalid_cursor");
            let res = client.get(&url).header("last-event-id", after.to_string()).send().await.expect("events");
            assert_eq!(res.status(), 400, "Last-Event-ID: {after}");
        }
        // The largest allowed one still answers: a snapshot numbered after it, then done.
        let res = client.get(format!("{url}?after={MAX_SEQUENCE}")).send().await.expect("events");
        let replay = read_all(res).await;
        assert_eq!(replay[0].1["sequence"], MAX_SEQUENCE + 1, "{replay:?}");
        assert_eq!(replay.last().expect("events").0, "done");
    }

    #[tokio::test]
    async fn resume_answers_with_the_continuation_numbered_after_the_interrupt() {
        let server = server().await;
        let client = reqwest::Client::builder().no_proxy().build().expect("client");
        let prompt = format!("tool: write {}", json!({"path": "out.txt", "content": "hello"}));
        let res = client
            .post(format!("{}/api/chat", server.base))
            .json(&json!({"projectId": server.project, "text": prompt, "requestId": "r1"}))
            .send()
            .await
            .expect("chat");
        let first = read_all(res).await;
        let (kind, interrupt) = first.last().expect("events");
        assert_eq!(kind, "interrupt", "{first:?}");
        let run_id = interrupt["runId"].as_str().expect("runId").to_owned();
        let interrupt_id = interrupt["interruptId"].as_str().expect("interruptId").to_owned();
        assert!(!server.dir.path().join("project/out.txt").exists());

        let resume = |key: &str| {
            client
                .post(format!("{}/api/runs/{run_id}/resume", server.base))
                .header("accept", "text/event-stream")
                .json(&json!({"interruptId": interrupt_id, "decision": "approve", "idempotencyKey": key}))
                .send()
        };
        let rest = read_all(resume("k1").await.expect("resume")).await;
        let kinds: Vec<&str> = rest.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(kinds.first(), Some(&"tool_started"), "{rest:?}");
        assert!(kinds.contains(&"tool_finished") && kinds.contains(&"text_delta"), "{rest:?}");
        assert_eq!(kinds.last(), Some(&"done"), "{rest:?}");
        let sequences: Vec<u64> = rest.iter().map(|(_, d)| d["sequence"].as_u64().expect("sequence")).collect();
        let from = interrupt["sequence"].as_u64().expect("sequence") + 1;
        assert_eq!(sequences, (from..from + sequences.len() as u64).collect::<Vec<_>>());
        assert_eq!(std::fs::read_to_string(server.dir.path().join("project/out.txt")).expect("written"), "hello");

        // The same key again: the first answer, and the same continuation; nothing runs twice.
        let again = read_all(resume("k1").await.expect("resume")).await;
        assert_eq!(again, rest);
        // A different key for the decided interrupt: the engine's JSON refusal.
        let res = resume("k2").await.expect("resume");
        assert_eq!(res.status(), 409);
        let body: Value = res.json().await.expect("json");
        assert_eq!(body["error"]["code"], "already_resolved");
        let user = server.engine.local_user().clone();
        let run = server.engine.runs().get(&user, &run_id.parse().expect("run id")).await.expect("run");
        assert_eq!(run.status, RunStatus::Completed);
    }
}
