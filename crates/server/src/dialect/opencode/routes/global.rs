//! The body of `GET /event` (every session of one directory, in OpenCode events) and of
//! `GET /global/event` (every session of every project of the user, each event wrapped
//! as OpenCode's `GlobalEvent`: `{directory, payload}`; connection events such as
//! `server.connected` under the directory `global`, as OpenCode's own server sends them).
//!
//! OpenCode's stream is global — one connection, all sessions, clients filter by
//! `sessionID` — while Spool's are per session. So a connection *follows* sessions: it
//! holds a native subscription (interactive: an OpenCode client can answer permissions)
//! and a [`Mapper`] for each session that has something going on, and merges them with
//! the directory's session changes and a heartbeat.
//!
//! * Which sessions: at connect, the directory's busy sessions and those with a pending
//!   permission; later, any session a change names. A session that went quiet is
//!   dropped again, so a connection holds one subscription per *active* session, not per
//!   session ever touched. Before dropping, the feed is drained: a change that arrived
//!   while it was followed (a new prompt) has its frames in the ring already, so
//!   draining sees the session busy again and keeps it; a change that arrives after the
//!   drop follows it anew.
//! * From where: a session followed again resumes from the cursor of the last frame
//!   this connection mapped, with the same mapper, so it misses nothing in between. A
//!   session this connection has not seen resumes from the prompt mark its OpenCode
//!   prompt left (`marks.rs`) — with a fast model the run may be over before the change
//!   is even read. Otherwise (a prompt through another dialect) it starts from a
//!   snapshot: a busy session's current run is replayed, a created or changed idle one
//!   is announced (`session.created` / `session.updated`). Only a run that was started
//!   elsewhere *and* finished before this connection read the change goes unreported;
//!   its messages are in the history like any other.
//! * No task and no channel per connection or session: this is a `Stream` that hyper
//!   polls when the socket takes more. Each session feed is a cursor into that session's
//!   ring; the list changes are a broadcast receiver; following a session (an engine
//!   call) is a future polled here.
//! * A feed that ends says why (the engine's [`Ended`]): cut — this connection fell more
//!   than the per-connection queue behind — or closed (its session was deleted or
//!   unloaded, or the server is stopping). Cut or stopping: the response ends and the
//!   client reconnects to a fresh start, like every Spool stream (OpenCode has no
//!   resume; a reconnecting client sees `server.connected` and the busy sessions'
//!   current runs replayed). Deleted or unloaded: the session is forgotten (a change
//!   that names it again follows it anew).
//!
//!   The subscriptions get a *child* of the connection's token, not the token itself:
//!   deleting one followed session must not drop the whole connection (the client would
//!   miss `session.deleted`). The price: a client whose socket is completely stuck is not
//!   dropped by the engine; it holds its cut subscriptions until its socket closes, but
//!   no buffered frames.
//! * A directory that is not a project yet (reading never registers one): the
//!   connection watches for it instead. When a change names a project it does not know,
//!   it asks whether that project is this user's project at this directory, and from then
//!   on follows it as if it had been there at connect.

use super::marks::PromptMarks;
use crate::dialect::opencode::mapper::{Announce, Mapper};
use crate::dialect::opencode::records::{Scope, session_info};
use crate::dialect::opencode::wire::{Event, SessionInfo, SessionTime, sse_global, sse_with_id};
use crate::dialect::shared::{Behind, Follow, FormMapper};
use crate::state::SessionForms;
use bytes::{Bytes, BytesMut};
use futures::future::BoxFuture;
use futures::stream::{BoxStream, FuturesUnordered};
use futures::{FutureExt, Stream, StreamExt};
use spool_engine::lists::Change;
use spool_engine::{Ended, Engine, TypedSubscription, Viewer};
use spool_protocol::frame::{Frame, FrameBody};
use spool_protocol::time::Millis;
use spool_protocol::time::now_ms;
use spool_protocol::{ClientKind, Cursor, Project, ProjectId, SessionId, SessionStatus, StreamId, UserId};
use std::collections::{HashMap, HashSet, VecDeque};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Interval;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

/// Which sessions a connection follows.
pub enum Reach {
    /// `GET /event`: one directory's; `project` is `None` while it is not a project.
    Directory { path: String, project: Option<Project> },
    /// `GET /global/event`: every project's of the user, events wrapped `{directory, payload}`.
    All,
}

/// The `directory` of a global event that belongs to no session.
const GLOBAL_DIRECTORY: &str = "global";

/// OpenCode's heartbeat interval (`server.heartbeat`).
pub const HEARTBEAT: Duration = Duration::from_secs(10);

/// How a connection behaves.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Seed 004's per-token `message.part.updated` (see `mapper.rs`).
    pub legacy_deltas: bool,
    pub heartbeat: Duration,
    /// The client's `Last-Event-ID`, read with [`since_of`]: when it last heard from us.
    pub since: Option<Millis>,
}

/// How far before its `Last-Event-ID` a reconnecting client is told what changed: an
/// event sent just before that one may stand for a change the client never got.
const MISSED_MARGIN_MS: Millis = 5_000;

/// Most sessions whose ended runs a reconnecting client is told of.
const MISSED_SESSIONS: u32 = 64;

/// When the event a client names in `Last-Event-ID` was sent (see
/// [`GlobalStream::next_id`]); `None` for an id this server did not make.
pub fn since_of(id: &str) -> Option<Millis> {
    let digits = id.strip_prefix("evt_")?.get(..13)?;
    digits.bytes().all(|b| b.is_ascii_digit()).then(|| digits.parse().ok()).flatten()
}

/// Most quiet sessions a connection remembers (see [`GlobalStream::quiet`]).
const QUIET_SESSIONS: usize = 1024;

/// OpenCode's output form of a session (see `dialect/shared.rs`): connections with the
/// same delta style and directory map a session's frames into the same events, so
/// they share one mapping and one serialization per frame. Each connection only puts
/// its own event id in front. The forms live in [`SessionForms::opencode`].
type FormKey = (bool, String);

impl FormMapper for Mapper {
    /// Each event's JSON without its opening brace ([`Event::shared_body`]).
    type Out = Vec<Bytes>;

    fn map(&mut self, frame: &Frame) -> Vec<Bytes> {
        Mapper::map(self, &frame.body, now_ms()).iter().map(Event::shared_body).collect()
    }
}

/// One session being followed.
struct Feed {
    session: SessionId,
    subscription: TypedSubscription,
    follow: Follow<FormKey, Mapper>,
    /// The last frame mapped: where following the session again resumes.
    cursor: Option<Cursor>,
    /// On `/global/event`: the session's directory, wrapping each of its events.
    directory: Option<String>,
}

impl Feed {
    fn map(&mut self, forms: &SessionForms, frame: &Frame) -> Result<Arc<Vec<Bytes>>, Behind> {
        self.cursor = Some(frame.cursor());
        self.follow.map(&forms.opencode, frame)
    }

    fn is_active(&self) -> bool {
        self.follow.peek(|m| m.is_some_and(Mapper::is_active))
    }
}

/// What a finished engine call brings back.
enum Step {
    /// Sessions to follow (the connect-time discovery), and what a reconnecting client
    /// missed of the others.
    Discovered(Vec<SessionId>, Vec<(String, Vec<Event>)>),
    /// Events of one directory (a deleted session's, on `/global/event`).
    Push(String, Vec<Event>),
    /// A followed session, with the events of its first frame (the snapshot).
    Feed(Box<Feed>, Vec<Arc<Vec<Bytes>>>),
    /// Not followed after all (gone, another directory's, over a limit): forget it.
    Forget(SessionId),
    /// This connection was cut for falling behind: end the response.
    Cut,
    /// The directory's project, registered after connect, and the session whose change
    /// named it.
    Adopt(ProjectId, Option<(SessionId, Announce)>),
    /// A project that is not this directory's.
    Ignore,
}

pub struct GlobalStream {
    engine: Engine,
    /// The server's encode-once forms, OpenCode's among them.
    forms: Arc<SessionForms>,
    user: UserId,
    /// The directory's canonical path (empty on `/global/event`).
    directory: String,
    /// Its project; `None` until one is registered for the directory.
    project: Option<ProjectId>,
    /// `/global/event`: every project of the user, wrapped events.
    all: bool,
    options: Options,
    /// Cancelled when the connection is dropped; feeds get children of it.
    connection: CancellationToken,
    killed: Pin<Box<WaitForCancellationFutureOwned>>,
    /// The server is stopping: the stream ends (cleanly, unlike `killed`'s drop).
    closing: Pin<Box<WaitForCancellationFutureOwned>>,
    changes: BoxStream<'static, Result<Change, tokio::sync::broadcast::error::RecvError>>,
    tasks: FuturesUnordered<BoxFuture<'static, Step>>,
    feeds: Vec<Feed>,
    /// Sessions with a feed or a follow in flight.
    followed: HashSet<SessionId>,
    /// Sessions followed before and dropped when they went quiet: their mapper and the
    /// cursor of the last frame seen, so following them again resumes exactly there.
    quiet: HashMap<SessionId, (Mapper, Cursor)>,
    marks: PromptMarks,
    /// Round-robin start, so one chatty session cannot starve the others.
    next_feed: usize,
    heartbeat: Interval,
    queue: VecDeque<Bytes>,
    /// Names this connection's events: `evt_<ms><tag><counter>` (see [`since_of`]).
    tag: String,
    counter: u64,
    /// The client reconnected with the id of the last event it had, sent at this time
    /// (ms): it gets what it missed since (see [`Mapper::missed`]).
    since: Option<Millis>,
    ended: bool,
}

impl GlobalStream {
    /// Subscribes to the list changes at once (so nothing between now and the first
    /// poll is missed) and starts with `server.connected`.
    pub fn new(
        engine: Engine,
        forms: Arc<SessionForms>,
        user: UserId,
        reach: Reach,
        connection: CancellationToken,
        marks: PromptMarks,
        options: Options,
    ) -> Self {
        let changes = futures::stream::unfold(engine.lists().watch_changes(), |mut rx| async move {
            let next = rx.recv().await;
            match next {
                Err(tokio::sync::broadcast::error::RecvError::Closed) => None,
                other => Some((other, rx)),
            }
        })
        .fuse()
        .boxed();
        let heartbeat = crate::http::sse::heartbeat(options.heartbeat);
        let stream_id = StreamId::new();
        let (directory, project, all) = match reach {
            Reach::Directory { path, project } => (path, project.map(|p| p.id), false),
            Reach::All => (String::new(), None, true),
        };
        let mut this = GlobalStream {
            killed: Box::pin(connection.clone().cancelled_owned()),
            closing: Box::pin(engine.lists().closed().cancelled_owned()),
            engine,
            forms,
            user,
            directory,
            project,
            all,
            options,
            connection,
            changes,
            tasks: FuturesUnordered::new(),
            feeds: Vec::new(),
            followed: HashSet::new(),
            quiet: HashMap::new(),
            marks,
            next_feed: 0,
            heartbeat,
            queue: VecDeque::new(),
            // The random tail of a fresh id keeps two connections' ids apart.
            tag: stream_id.as_str()[stream_id.as_str().len() - 8..].to_owned(),
            counter: 0,
            // A margin before it: what is told again is whole (statuses, whole parts),
            // never a delta, so telling it twice is harmless, and missing an end is not.
            since: options.since.map(|ms| ms - MISSED_MARGIN_MS),
            ended: false,
        };
        this.push(&[Event::ServerConnected {}]);
        this.discover();
        this
    }

    /// Queues mapped events from their shared bodies, each with this connection's id;
    /// on `/global/event` wrapped with `directory`. Ids are the time they are sent (13
    /// digits of ms, so a client's `Last-Event-ID` says when it last heard from us), this
    /// connection's tag and a counter (ids of one connection ascend).
    fn push_shared(&mut self, directory: Option<&str>, batches: &[Arc<Vec<Bytes>>]) {
        let mut buf = BytesMut::new();
        // One clock read per batch: the events of a batch are sent together.
        let ms = now_ms();
        for body in batches.iter().flat_map(|b| b.iter()) {
            self.counter += 1;
            let id = format_args!("evt_{ms:013}{}{:08}", self.tag, self.counter);
            match directory {
                Some(directory) => sse_global(&mut buf, directory, id, body),
                None => sse_with_id(&mut buf, id, body),
            }
        }
        if !buf.is_empty() {
            self.queue.push_back(buf.freeze());
        }
    }

    /// Queues events of the connection itself (on `/global/event`, of no directory).
    fn push(&mut self, events: &[Event]) {
        self.push_in(GLOBAL_DIRECTORY, events);
    }

    /// Queues events of `directory` (which only `/global/event` names).
    fn push_in(&mut self, directory: &str, events: &[Event]) {
        let bodies = Arc::new(events.iter().map(Event::shared_body).collect());
        self.push_shared(self.all.then_some(directory), &[bodies]);
    }

    /// Finds the sessions to follow at connect (and after missing changes).
    fn discover(&mut self) {
        let one = match (&self.project, self.all) {
            (Some(project), false) => Some((project.clone(), self.directory.clone())),
            (None, false) => return,
            (_, true) => None,
        };
        let (engine, user) = (self.engine.clone(), self.user.clone());
        let (since, model) = (self.since, self.engine.model_name());
        self.tasks.push(
            async move {
                let projects = match one {
                    Some(one) => vec![one],
                    None => match engine.projects().list(&user).await {
                        Ok(projects) => projects.into_iter().map(|p| (p.id, p.path)).collect(),
                        Err(e) => {
                            tracing::warn!(error = %e, "opencode /global/event: could not list projects");
                            Vec::new()
                        }
                    },
                };
                let waiting: HashSet<SessionId> = match engine.runs().pending_approvals(&user).await {
                    Ok(pending) => pending.into_iter().map(|a| a.session_id).collect(),
                    Err(e) => {
                        tracing::warn!(error = %e, "opencode /event: could not list pending approvals");
                        HashSet::new()
                    }
                };
                let (mut active, mut missed) = (Vec::new(), Vec::new());
                for (project, directory) in projects {
                    let (found, told) =
                        discover_in(&engine, &user, (&project, &directory), &waiting, since, &model).await;
                    active.extend(found);
                    if !told.is_empty() {
                        missed.push((directory, told));
                    }
                }
                Step::Discovered(active, missed)
            }
            .boxed(),
        );
    }

    /// Starts following `session`: from where this connection left it, else from the
    /// mark of a prompt sent through the OpenCode routes, else from a snapshot.
    fn follow(&mut self, session: SessionId, announce: Announce) {
        if !self.followed.insert(session.clone()) {
            return;
        }
        // On `/event` only the directory's project; on `/global/event` any of the user's.
        let only = match (&self.project, self.all) {
            (Some(project), false) => Some((project.clone(), self.directory.clone())),
            (None, false) => return,
            (_, true) => None,
        };
        let (engine, forms, user, all) = (self.engine.clone(), self.forms.clone(), self.user.clone(), self.all);
        let kill = self.connection.child_token();
        let reused = self.quiet.remove(&session);
        let (legacy, since, model) = (self.options.legacy_deltas, self.since, self.engine.model_name());
        let marked = self.marks.get(&session);
        self.tasks.push(
            async move {
                let detail = match engine.sessions().get(&user, &session).await {
                    Ok(detail) => detail,
                    Err(_) => return Step::Forget(session),
                };
                let directory = match only {
                    Some((project, directory)) if detail.session.project_id == project => directory,
                    Some(_) => return Step::Forget(session),
                    None => match engine.projects().get(&user, &detail.session.project_id).await {
                        Ok(project) => project.path,
                        Err(_) => return Step::Forget(session),
                    },
                };
                let stream_id = detail.stream_id;
                let (mapper, left_at) = match reused {
                    Some((mapper, cursor)) => (mapper, Some(cursor)),
                    None => {
                        let scope =
                            Scope { session_id: session.clone(), directory: directory.clone(), default_model: model };
                        (Mapper::new(scope).legacy_deltas(legacy).since(since).announce(announce), None)
                    }
                };
                // A cursor of another instance (the session was reloaded) means a snapshot.
                let cursor = [left_at, marked].into_iter().flatten().find(|c| c.stream_id == stream_id);
                let mut subscription = match engine
                    .sessions()
                    .subscribe(&user, &session, cursor.as_ref(), kill, Viewer::answering(ClientKind::Opencode))
                    .await
                {
                    Ok((subscription, _)) => subscription.typed(),
                    Err(e) => {
                        tracing::warn!(session = %session, error = %e, "opencode /event: could not follow a session");
                        return Step::Forget(session);
                    }
                };
                // The first item is a replay or a snapshot — or, for a cursor that is
                // caught up, the next live frame. After a snapshot of a busy session the
                // mapper needs to know where the run began.
                let Some(frames) = subscription.next().await else { return Step::Forget(session) };
                let active = frames.iter().find_map(|f| match &f.body {
                    FrameBody::Snapshot { state } => state.active_run.as_ref().map(|a| a.run_id.clone()),
                    _ => None,
                });
                let start = match active {
                    Some(run) => engine.runs().get(&user, &run).await.ok().map(|r| r.user_message_index),
                    None => None,
                };
                let key = (mapper.legacy(), mapper.directory().to_owned());
                let follow = Follow::new(key, mapper.run_start(start));
                let directory = all.then_some(directory);
                let mut feed = Feed { session, subscription, follow, cursor: None, directory };
                match frames.iter().map(|f| feed.map(&forms, f)).collect() {
                    Ok(events) => Step::Feed(Box::new(feed), events),
                    Err(Behind) => Step::Cut,
                }
            }
            .boxed(),
        );
    }

    fn on_change(&mut self, change: Change) {
        if self.all {
            return self.on_any_change(change);
        }
        let Some(ours) = self.project.clone() else {
            return self.watch_for_project(change);
        };
        match change {
            Change::SessionCreated { session, project } if project == ours => self.follow(session, Announce::Created),
            Change::SessionChanged { session, project } if project == ours => self.follow(session, Announce::Updated),
            Change::SessionDeleted { session, project } if project == ours => {
                let known = self.feeds.iter().find(|f| f.session == session);
                let known = known.and_then(|f| f.follow.peek(|m| m.and_then(|m| m.session().cloned())));
                let info = match known {
                    Some(s) => session_info(&s, None, &self.directory),
                    None => deleted_info(&session, &project, &self.directory),
                };
                self.push(&[Event::SessionDeleted { session_id: session.to_string(), info }]);
            }
            _ => {}
        }
    }

    /// On `/global/event`: a change of any project (following checks it is the user's).
    fn on_any_change(&mut self, change: Change) {
        match change {
            Change::SessionCreated { session, .. } => self.follow(session, Announce::Created),
            Change::SessionChanged { session, .. } => self.follow(session, Announce::Updated),
            Change::SessionDeleted { session, project } => {
                let known = self.feeds.iter().find(|f| f.session == session);
                let known = known.and_then(|f| f.follow.peek(|m| m.and_then(|m| m.session().cloned())));
                let (engine, user) = (self.engine.clone(), self.user.clone());
                self.tasks.push(
                    async move {
                        let Ok(project) = engine.projects().get(&user, &project).await else { return Step::Ignore };
                        let info = match known {
                            Some(s) => session_info(&s, None, &project.path),
                            None => deleted_info(&session, &project.id, &project.path),
                        };
                        let deleted = Event::SessionDeleted { session_id: session.to_string(), info };
                        Step::Push(project.path, vec![deleted])
                    }
                    .boxed(),
                );
            }
            Change::ProjectChanged { .. } => {}
        }
    }

    /// No project at this directory yet: asks whether the project a change names is
    /// this user's project here (registered since connect).
    fn watch_for_project(&mut self, change: Change) {
        let (project, session) = match change {
            Change::SessionCreated { session, project } => (project, Some((session, Announce::Created))),
            Change::SessionChanged { session, project } => (project, Some((session, Announce::Updated))),
            Change::ProjectChanged { project } => (project, None),
            Change::SessionDeleted { .. } => return,
        };
        let (engine, user, directory) = (self.engine.clone(), self.user.clone(), self.directory.clone());
        self.tasks.push(
            async move {
                match engine.projects().get(&user, &project).await {
                    Ok(p) if p.path == directory => Step::Adopt(project, session),
                    _ => Step::Ignore,
                }
            }
            .boxed(),
        );
    }

    fn on_step(&mut self, step: Step, cx: &mut Context<'_>) {
        match step {
            Step::Discovered(sessions, missed) => {
                for (directory, events) in missed {
                    self.push_in(&directory, &events);
                }
                sessions.into_iter().for_each(|s| self.follow(s, Announce::Nothing));
            }
            Step::Push(directory, events) => self.push_in(&directory, &events),
            Step::Feed(feed, events) => {
                self.push_shared(feed.directory.as_deref(), &events);
                let quiet = !feed.is_active();
                self.feeds.push(*feed);
                if quiet {
                    self.drain_or_drop(self.feeds.len() - 1, cx);
                }
            }
            Step::Forget(session) => {
                self.followed.remove(&session);
            }
            Step::Cut => self.ended = true,
            Step::Adopt(project, session) => {
                let ours = self.project.get_or_insert(project.clone());
                if let Some((session, announce)) = session
                    && *ours == project
                {
                    self.follow(session, announce);
                }
            }
            Step::Ignore => {}
        }
    }

    /// Maps one batch of a feed's frames into the queue. A feed that fell behind the
    /// shared outputs ends the response, like a cut subscription.
    fn map_chunk(&mut self, at: usize, frames: &[Arc<Frame>]) {
        let feed = &mut self.feeds[at];
        match frames.iter().map(|frame| feed.map(&self.forms, frame)).collect::<Result<Vec<_>, _>>() {
            Ok(events) => {
                let directory = feed.directory.clone();
                self.push_shared(directory.as_deref(), &events);
            }
            Err(Behind) => self.ended = true,
        }
    }

    /// Polls the feeds, from the round-robin start, until one has something. Returns
    /// whether anything happened.
    fn poll_feeds(&mut self, cx: &mut Context<'_>) -> bool {
        let n = self.feeds.len();
        for k in 0..n {
            let at = (self.next_feed + k) % n;
            match self.feeds[at].subscription.poll_next_unpin(cx) {
                Poll::Pending => continue,
                Poll::Ready(Some(chunk)) => {
                    self.next_feed = at + 1;
                    self.map_chunk(at, &chunk);
                    if !self.feeds[at].is_active() {
                        self.drain_or_drop(at, cx);
                    }
                }
                Poll::Ready(None) => {
                    let feed = self.feeds.swap_remove(at);
                    self.ended_feed(feed);
                }
            }
            return true;
        }
        false
    }

    /// The session went quiet: take whatever its ring already holds; if it is still
    /// quiet, stop following it (see the module docs for why this cannot miss a run).
    fn drain_or_drop(&mut self, at: usize, cx: &mut Context<'_>) {
        loop {
            match self.feeds[at].subscription.poll_next_unpin(cx) {
                Poll::Ready(Some(chunk)) => {
                    self.map_chunk(at, &chunk);
                    if self.feeds[at].is_active() {
                        return;
                    }
                }
                Poll::Ready(None) => {
                    let feed = self.feeds.swap_remove(at);
                    self.ended_feed(feed);
                    return;
                }
                Poll::Pending => {
                    let mut feed = self.feeds.swap_remove(at);
                    self.followed.remove(&feed.session);
                    // Without a mapper at the feed's very frame (others moved the shared
                    // one on), the session is simply forgotten: it starts from a mark or
                    // a snapshot next time.
                    let left = feed.cursor.and_then(|c| Some((feed.follow.take_mapper(Some(c.seq))?, c)));
                    if let Some((mapper, cursor)) = left {
                        if self.quiet.len() >= QUIET_SESSIONS
                            && let Some(any) = self.quiet.keys().next().cloned()
                        {
                            self.quiet.remove(&any);
                        }
                        self.quiet.insert(feed.session, (mapper, cursor));
                    }
                    return;
                }
            }
        }
    }

    fn ended_feed(&mut self, feed: Feed) {
        match feed.subscription.ended() {
            Some(Ended::Lagged | Ended::Shutdown) | None => self.ended = true,
            Some(Ended::SessionDeleted | Ended::Unloaded) => {
                self.followed.remove(&feed.session);
            }
        }
    }
}

/// A deleted session this connection never followed: what is left to say of it.
fn deleted_info(session: &SessionId, project: &ProjectId, directory: &str) -> SessionInfo {
    SessionInfo {
        id: session.to_string(),
        slug: session.to_string(),
        project_id: project.to_string(),
        directory: directory.to_owned(),
        title: String::new(),
        version: env!("CARGO_PKG_VERSION"),
        time: SessionTime { created: 0, updated: 0, archived: None },
        permission: Vec::new(),
        revert: None,
    }
}

/// One project's sessions to follow at connect — the busy ones and those `waiting` for an
/// answer — and, for a client back after a drop (`since`), what it missed of the runs
/// that ended while it was away.
async fn discover_in(
    engine: &Engine,
    user: &UserId,
    (project, directory): (&ProjectId, &str),
    waiting: &HashSet<SessionId>,
    since: Option<Millis>,
    model: &str,
) -> (Vec<SessionId>, Vec<Event>) {
    let sessions = match engine.sessions().list(user, project, false).await {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "opencode /event: could not list sessions");
            return (Vec::new(), Vec::new());
        }
    };
    let active: Vec<SessionId> = sessions
        .into_iter()
        .filter(|s| s.status == SessionStatus::Busy || waiting.contains(&s.session.id))
        .map(|s| s.session.id)
        .collect();
    let Some(since) = since else { return (active, Vec::new()) };
    let ended = match engine.sessions().ended_after(user, project, since, MISSED_SESSIONS).await {
        Ok(ended) => ended,
        Err(e) => {
            tracing::warn!(error = %e, "opencode /event: could not list the runs that ended");
            Vec::new()
        }
    };
    let mut missed = Vec::new();
    for id in ended.into_iter().filter(|id| !active.contains(id)) {
        let Ok(detail) = engine.sessions().get(user, &id).await else { continue };
        if detail.state.active_run.is_some() {
            continue;
        }
        let scope = Scope { session_id: id, directory: directory.to_owned(), default_model: model.to_owned() };
        missed.extend(Mapper::new(scope).missed(&detail.state, since, now_ms()));
    }
    (active, missed)
}

impl Stream for GlobalStream {
    type Item = Result<Bytes, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        loop {
            if let Some(bytes) = this.queue.pop_front() {
                return Poll::Ready(Some(Ok(bytes)));
            }
            if this.ended || this.killed.as_mut().poll(cx).is_ready() || this.closing.as_mut().poll(cx).is_ready() {
                return Poll::Ready(None);
            }
            match this.changes.poll_next_unpin(cx) {
                Poll::Ready(Some(Ok(change))) => {
                    this.on_change(change);
                    continue;
                }
                // Missed changes: look at the directory again.
                Poll::Ready(Some(Err(_))) => {
                    this.discover();
                    continue;
                }
                Poll::Ready(None) | Poll::Pending => {}
            }
            if let Poll::Ready(Some(step)) = this.tasks.poll_next_unpin(cx) {
                this.on_step(step, cx);
                continue;
            }
            if this.poll_feeds(cx) {
                continue;
            }
            if this.heartbeat.poll_tick(cx).is_ready() {
                this.push(&[Event::ServerHeartbeat {}]);
                continue;
            }
            return Poll::Pending;
        }
    }
}
