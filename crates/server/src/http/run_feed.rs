//! One run feed: how the run stream, the AI SDK and AG-UI routes (each dialect's
//! `routes.rs` in `dialect/run_stream/`, `dialect/ai_sdk/`, `dialect/ag_ui/`) follow a
//! run inside its session's stream. Each of them is a [`RunDialect`] (its fold, its
//! shared forms, the bytes a step writes and how the stream closes); this file is the
//! loop they share.
//!
//! * The feed reads the session subscription the engine positioned for it (from the
//!   run's start, after an interrupt, after a client's sequence, or from a snapshot)
//!   and maps each frame through the run's shared form (`dialect/shared.rs`), so a
//!   frame is mapped and encoded once per run and form, whatever the number of streams.
//! * It stops once the run finished, and once the run waits for a person and the feed
//!   has caught up with the live frames (a replay through an interrupt decided since
//!   goes on). Then the dialect queues its last bytes: AI SDK's `[DONE]`, AG-UI's
//!   `RUN_FINISHED` or `RUN_ERROR`; the run stream has none.
//! * A subscription that ends (the session closed; the connection cut for reading too
//!   slowly or revoked; a stream fallen behind its run's shared form, which it treats
//!   the same way) ends the body without those last bytes: the client comes back.
//! * `: keep-alive` comments fill silences; ready events go out in one write per burst.
//!
//! How the run ended, failed run's error included, comes in the run's `agent_end`: no
//! feed reads the run back from the store.
//!
//! The chat dialects (the AI SDK, AG-UI: a [`ChatDialect`] each) also share how a stream
//! starts: a prompt ([`prompt_chat`]), a run followed from its start
//! ([`attach_from_start`]) or from the session snapshot when its frames have left the
//! buffer ([`from_snapshot`]), and the continuation after an interrupt
//! ([`subscribe_after`]), where each only builds its own fold.

use super::sse;
use crate::dialect::RunForms;
use crate::dialect::shared::{self, Follow, FormMapper, Forms, RunForm};
use crate::error::ApiError;
use crate::state::AppState;
use axum::response::Response;
use bytes::{Bytes, BytesMut};
use futures::{FutureExt, StreamExt};
use spool_engine::{Engine, EngineError, MAX_PAGE, PromptInput, RunAfter, RunFrom, TypedSubscription, Viewer};
use spool_protocol::frame::{Frame, FrameBody};
use spool_protocol::{Approval, ApprovalId, IndexedMessage, Run, RunId, SessionId, SessionState, UserId};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::hash::Hash;
use std::sync::Arc;
use tokio::time::Interval;
use tokio_util::sync::CancellationToken;

/// Where the run stands for a feed, after the last frame it mapped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Place {
    /// The run waits for a person.
    pub waiting: bool,
    /// Nothing more of the run follows.
    pub finished: bool,
}

/// Bytes to write, with the run-stream sequence they carry (`None` in dialects without
/// one): those at or before the client's `after` are not written.
pub(crate) type Ready = VecDeque<(Option<u64>, Bytes)>;

/// A run-following dialect, as one stream of it: the fold it maps with, and what the
/// stream does with each step and at its end.
pub(crate) trait RunDialect: Sized + Send + 'static {
    /// Which shared form a stream follows (how its fold started).
    type Key: Hash + Eq + Clone + Send + 'static;
    type Fold: FormMapper;
    /// The form, fold and stream that follow `run` from its `run.accepted`.
    fn from_start(run: RunId) -> (Self::Key, Self::Fold, Self);
    /// This dialect's forms in the application state.
    fn forms(forms: &RunForms) -> &Forms<Self::Key, Self::Fold>;
    /// Where the run stands as `fold` starts (before any frame).
    fn start(&mut self, fold: &Self::Fold) -> Place;
    /// Queues what one mapped frame writes; where the run stands after it.
    fn step(&mut self, step: &<Self::Fold as FormMapper>::Out, ready: &mut Ready) -> Place;
    /// Queues the stream's last bytes: the run finished, or waits and the feed caught up.
    fn close(&mut self, place: Place, ready: &mut Ready);
    /// The stream ended after its last bytes were written.
    fn ended(&mut self) {}
    /// Who its subscriptions count as, for presence.
    const VIEWER: Viewer;
}

/// One stream following a run: the session subscription, its place in the run's shared
/// form, and the bytes mapped but not yet written.
pub(crate) struct RunFeed<D: RunDialect> {
    subscription: TypedSubscription,
    follow: Follow<D::Key, D::Fold>,
    pub(crate) dialect: D,
    ready: Ready,
    /// Events up to this run-stream sequence are the client's already.
    after: u64,
    place: Place,
    /// The subscription ended: the body ends without the dialect's last bytes.
    cut: bool,
    /// The last bytes were queued.
    closed: bool,
}

impl<D: RunDialect> RunFeed<D> {
    pub(crate) fn new(subscription: TypedSubscription, key: D::Key, fold: D::Fold, mut dialect: D) -> Self {
        let place = dialect.start(&fold);
        let follow = Follow::new(key, fold);
        Self { subscription, follow, dialect, ready: Ready::new(), after: 0, place, cut: false, closed: false }
    }

    /// A feed of `run` from its `run.accepted`, on a subscription that holds it.
    pub(crate) fn from_start(subscription: TypedSubscription, run: RunId) -> Self {
        let (key, fold, dialect) = D::from_start(run);
        Self::new(subscription, key, fold, dialect)
    }

    /// Events up to `after` are not written (a run-stream client re-attaching).
    pub(crate) fn after(mut self, after: u64) -> Self {
        self.after = after;
        self
    }

    /// Queues bytes this stream made itself (an opening, a run drawn from a snapshot).
    pub(crate) fn push(&mut self, sequence: Option<u64>, bytes: Bytes) {
        self.ready.push_back((sequence, bytes));
    }

    /// Queues events already mapped (a replay from the run's frame log), with their
    /// sequences (`None`: an unnumbered one, presence).
    pub(crate) fn ready(mut self, events: Vec<(Option<u64>, Bytes)>) -> Self {
        self.ready.extend(events);
        self
    }

    /// Queues bytes to write before everything queued so far.
    pub(crate) fn push_front(&mut self, bytes: Bytes) {
        self.ready.push_front((None, bytes));
    }

    fn take(&mut self, frames: &[Arc<Frame>], forms: &RunForms) {
        for frame in frames {
            if self.place.finished {
                return;
            }
            let Ok(step) = self.follow.map(D::forms(forms), frame) else {
                // Behind the shared outputs with no fold of its own: like a slow client,
                // it ends and comes back.
                self.cut = true;
                return;
            };
            self.place = self.dialect.step(&step, &mut self.ready);
        }
    }

    fn close(&mut self) {
        self.dialect.close(self.place, &mut self.ready);
        self.closed = true;
    }

    /// The ready bytes the client does not have, in one chunk (a single step's shared
    /// bytes as they are).
    fn next_chunk(&mut self) -> Option<Bytes> {
        let mut chunk: Option<Bytes> = None;
        let mut joined: Option<BytesMut> = None;
        while let Some((sequence, bytes)) = self.ready.front() {
            if sequence.is_some_and(|s| s <= self.after) {
                self.ready.pop_front();
                continue;
            }
            let size = chunk.as_ref().map_or(0, Bytes::len) + joined.as_ref().map_or(0, BytesMut::len);
            if size > 0 && size + bytes.len() > MAX_CHUNK {
                break;
            }
            let (_, bytes) = self.ready.pop_front().expect("front was Some");
            match (&mut joined, chunk.take()) {
                (Some(buf), _) => buf.extend_from_slice(&bytes),
                (None, None) => chunk = Some(bytes),
                (None, Some(first)) => {
                    let mut buf = BytesMut::with_capacity(first.len() + bytes.len());
                    buf.extend_from_slice(&first);
                    buf.extend_from_slice(&bytes);
                    joined = Some(buf);
                }
            }
        }
        joined.map(BytesMut::freeze).or(chunk)
    }
}

/// Largest body chunk written at once when several events are ready (as the native
/// stream does: one write for a burst, not one per event).
const MAX_CHUNK: usize = 64 * 1024;

struct BodyState<D: RunDialect> {
    feed: RunFeed<D>,
    forms: Arc<RunForms>,
    keepalive: Interval,
}

/// The SSE response that writes `feed`.
pub(crate) fn response<D: RunDialect>(feed: RunFeed<D>, state: &AppState, content_type: &'static str) -> Response {
    let st = BodyState { feed, forms: state.forms.clone(), keepalive: sse::heartbeat(state.config.heartbeat) };
    let body = futures::stream::unfold(st, |mut st| async move {
        let chunk = next_chunk(&mut st).await?;
        Some((Ok::<_, Infallible>(chunk), st))
    });
    sse::response(content_type, body)
}

/// The next bytes to write, or `None` when the stream is over.
async fn next_chunk<D: RunDialect>(st: &mut BodyState<D>) -> Option<Bytes> {
    let BodyState { feed, forms, keepalive } = st;
    loop {
        if let Some(chunk) = feed.next_chunk() {
            keepalive.reset();
            return Some(chunk);
        }
        if feed.closed {
            feed.dialect.ended();
            return None;
        }
        if feed.cut {
            return None;
        }
        if feed.place.finished {
            feed.close();
            continue;
        }
        match feed.subscription.next().now_or_never() {
            Some(Some(frames)) => feed.take(&frames, forms),
            Some(None) => feed.cut = true,
            None => {
                // Caught up with the live frames: a run waiting for a person ends here.
                if feed.place.waiting {
                    feed.close();
                    continue;
                }
                tokio::select! {
                    item = feed.subscription.next() => match item {
                        Some(frames) => feed.take(&frames, forms),
                        None => feed.cut = true,
                    },
                    _ = keepalive.tick() => return Some(spool_protocol::sse::comment("keep-alive")),
                }
            }
        }
    }
}

/// What prompting gave: the new run's feed, or the run a retried `requestId` started
/// (which the caller follows from its start).
pub(crate) enum Prompted<D: RunDialect> {
    New(RunFeed<D>),
    Retried(RunId),
}

/// Prompts `session` and follows the new run from its `run.accepted`: subscribed before
/// prompting, so the run's first frame comes after the snapshot the subscription
/// starts with.
pub(crate) async fn prompt<D: RunDialect>(
    engine: &Engine,
    user: &UserId,
    session: &SessionId,
    input: PromptInput,
    connection: &CancellationToken,
) -> Result<Prompted<D>, EngineError> {
    let (anchor, _) = engine.sessions().subscribe(user, session, None, connection.clone(), D::VIEWER).await?;
    let accepted = engine.runs().prompt(user, session, input).await?;
    Ok(match accepted.created {
        true => Prompted::New(RunFeed::from_start(anchor.typed(), accepted.run_id)),
        false => Prompted::Retried(accepted.run_id),
    })
}

/// Prompts `session` with a chat dialect's message (its text, request id and client
/// tools; no approval policy, the default on disconnect, not queued) and follows the
/// new run; a retried request's run, already started, is read and followed from its start.
pub(crate) async fn prompt_chat<D: ChatDialect>(
    engine: &Engine,
    user: &UserId,
    session: &SessionId,
    input: PromptInput,
    connection: CancellationToken,
) -> Result<RunFeed<D>, ApiError> {
    match prompt(engine, user, session, input, &connection).await? {
        Prompted::New(feed) => Ok(feed),
        Prompted::Retried(run) => {
            attach_from_start(engine, user, engine.runs().get(user, &run).await?, connection).await
        }
    }
}

/// A run drawn from the session snapshot a subscription starts with, when the run's
/// frames have left the buffer: the snapshot, the stored run read after it (final once
/// the snapshot shows the run settled) and the run's committed messages.
pub(crate) struct FromSnapshot {
    snapshot: Arc<Frame>,
    pub run: Run,
    pub messages: Vec<IndexedMessage>,
}

impl FromSnapshot {
    pub(crate) async fn read(
        engine: &Engine,
        user: &UserId,
        subscription: &mut TypedSubscription,
        run: &Run,
    ) -> Result<Self, ApiError> {
        let snapshot = sse::first_frame(subscription).ok_or(ApiError::not_found("run"))?;
        let FrameBody::Snapshot { state } = &snapshot.body else {
            return Err(ApiError::not_found("run"));
        };
        let run = engine.runs().get(user, &run.id).await?;
        let messages = if run.user_message_index >= state.first_index {
            state.messages.clone()
        } else {
            let before = run.user_message_index + 1 + u64::from(MAX_PAGE);
            engine.sessions().messages(user, &run.session_id, Some(before), Some(MAX_PAGE)).await?.messages
        };
        Ok(Self { snapshot, run, messages })
    }

    /// The session as the snapshot shows it.
    pub(crate) fn state(&self) -> &SessionState {
        match &self.snapshot.body {
            FrameBody::Snapshot { state } => state,
            _ => unreachable!("read checked it is a snapshot"),
        }
    }
}

/// A chat dialect (the AI SDK, AG-UI): it follows a run from its start, or from the
/// session snapshot its subscription starts with when the run's frames have left the
/// buffer. Its forms are keyed as every run-following fold's ([`RunForm`]).
pub(crate) trait ChatDialect: RunDialect<Key = RunForm> {
    /// The fold and stream that go on from `from`'s snapshot, and the bytes that draw
    /// the run as it shows it. `after`: the stream continues the run from that
    /// approval's interrupt, which the client holds the run up to.
    fn from_snapshot(from: &FromSnapshot, after: Option<&Approval>) -> (Self::Fold, Self, Vec<Bytes>);
}

/// Follows `run` from its start: a replay of its frames while the buffer holds them,
/// else drawn from a snapshot.
pub(crate) async fn attach_from_start<D: ChatDialect>(
    engine: &Engine,
    user: &UserId,
    run: Run,
    kill: CancellationToken,
) -> Result<RunFeed<D>, ApiError> {
    let (subscription, start) = engine.runs().subscribe(user, &run, RunAfter::Seq(0), kill, D::VIEWER).await?;
    let subscription = subscription.typed();
    match start.from {
        RunFrom::Replay(_) => Ok(RunFeed::from_start(subscription, run.id)),
        RunFrom::Snapshot(_) => from_snapshot(engine, user, subscription, run, None).await,
    }
}

/// A feed whose subscription starts with a session snapshot: the run drawn from it,
/// then live. Its fold is its own (a form of one).
pub(crate) async fn from_snapshot<D: ChatDialect>(
    engine: &Engine,
    user: &UserId,
    mut subscription: TypedSubscription,
    run: Run,
    after: Option<&Approval>,
) -> Result<RunFeed<D>, ApiError> {
    let from = FromSnapshot::read(engine, user, &mut subscription, &run).await?;
    let (fold, dialect, drawn) = D::from_snapshot(&from, after);
    let mut feed = RunFeed::new(subscription, RunForm::Alone(shared::alone()), fold, dialect);
    for bytes in drawn {
        feed.push(None, bytes);
    }
    Ok(feed)
}

/// A subscription to an approval's run for the continuation after its request.
pub(crate) struct AfterInterrupt {
    pub run: Run,
    pub subscription: TypedSubscription,
    /// What the run waits for as the subscription starts (the engine says).
    pub waiting: Option<ApprovalId>,
    pub from: Continuation,
}

/// Where the continuation's frames start.
pub(crate) enum Continuation {
    /// Right after the request: the engine knew where the interrupt was.
    AfterRequest,
    /// At the run's start (the engine no longer knew the interrupt's place, a restart in
    /// between): the fold sends nothing up to the request.
    RunStart,
    /// With a session snapshot: the run's frames are gone.
    Snapshot,
}

/// Subscribes to `approval`'s run from the frame after its request.
pub(crate) async fn subscribe_after(
    engine: &Engine,
    user: &UserId,
    approval: &Approval,
    kill: CancellationToken,
    viewer: Viewer,
) -> Result<AfterInterrupt, ApiError> {
    let run = engine.runs().get(user, &approval.run_id).await?;
    let (subscription, start) =
        engine.runs().subscribe(user, &run, RunAfter::Interrupt(approval.id.clone()), kill, viewer).await?;
    let from = match start.from {
        RunFrom::Replay(_) if start.after > 0 => Continuation::AfterRequest,
        RunFrom::Replay(_) => Continuation::RunStart,
        RunFrom::Snapshot(_) => Continuation::Snapshot,
    };
    Ok(AfterInterrupt { run, subscription: subscription.typed(), waiting: start.waiting, from })
}
