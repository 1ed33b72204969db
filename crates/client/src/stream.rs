//! [`SessionStream`]: a session's native stream (`GET /api/sessions/:id/events`) that
//! comes back by itself, the way the browser client's `Recovering` does (seed 001).
//!
//! * It resumes with its cursor (`Last-Event-ID: streamId:seq`), so the server replays
//!   exactly the frames it missed; frames at or behind the cursor are dropped.
//! * A gap in the seqs, a frame of another stream or a delta that does not join the
//!   draft is not applied: it reconnects without a cursor and takes the snapshot the
//!   server then sends. A second resync within 5 s waits through the backoff, so a
//!   server that keeps sending something unusable is not hammered.
//! * A lost connection is retried after a delay that starts at 1.5 s and doubles up to
//!   30 s, with up to a quarter more of jitter so clients cut off together do not come
//!   back in step; any frame or heartbeat resets it.
//! * A watchdog drops a connection that brought nothing (not even a heartbeat, which
//!   the server sends every 15 s) for 45 s: a half-open TCP connection never errors.
//!
//! Every item is an [`Update`]: what happened and the folded state after it. The state
//! is an `Arc` the stream changes in place when no one else holds it (`Arc::make_mut`):
//! drop an update before asking for the next one and no token copies the session.
//!
//! SSE is decoded with `spool_protocol::sse::Decoder` and frames are folded with
//! `spool_protocol::view`, the same code the server's own followers use.

use crate::error::Error;
use crate::fold::{Fold, Verdict};
use crate::rest::{Client, api_error, read_limited};
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use spool_protocol::frame::{Frame, SessionState};
use spool_protocol::sse::{Decoder, SseEvent};
use spool_protocol::{Cursor, SessionId, StreamId};
use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Instant;

/// How the stream recovers. The defaults are seed 001's; tests shorten them.
#[derive(Clone, Debug)]
pub struct StreamOptions {
    /// The first delay after a lost connection (1.5 s), and what any frame resets it to.
    pub backoff_min: Duration,
    /// The longest delay (30 s).
    pub backoff_max: Duration,
    /// A connection silent this long is dropped and made again (45 s).
    pub watchdog: Duration,
    /// Registers the connection as an interactive view (`?approvals=1`): a place where a
    /// person answers approvals, which a run with the `deny` policy waits for.
    pub interactive: bool,
}

impl Default for StreamOptions {
    fn default() -> Self {
        Self {
            backoff_min: Duration::from_millis(1500),
            backoff_max: Duration::from_secs(30),
            watchdog: Duration::from_secs(45),
            interactive: false,
        }
    }
}

/// Within this long of the previous resync, the next one waits through the backoff.
const RESYNC_AGAIN: Duration = Duration::from_secs(5);

/// One item of a [`SessionStream`]: what happened, and the session as it is now.
#[derive(Clone, Debug)]
pub struct Update {
    pub event: Event,
    pub state: Arc<SessionState>,
}

/// What a [`SessionStream`] saw.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Event {
    /// A snapshot replaced the state: the first one, and one after every resync or
    /// resume the server could not replay.
    Snapshot,
    /// A frame (`session.state`, `run.accepted`, `loop.event`, …) was applied.
    Frame(Box<Frame>),
    /// The connection was lost; the next attempt is in `retry_in`.
    Disconnected { reason: String, retry_in: Duration },
    /// Connected again after a loss or a resync.
    Reconnected,
    /// A frame could not be applied; the stream reconnects for a snapshot.
    Resync { reason: String },
    /// The server refuses the stream for good (the session was deleted, the token
    /// revoked). The stream ends after this.
    Failed { error: String },
}

// `follow` lives beside the stream it opens, so the REST side needs nothing of it.
impl Client {
    /// Follows a session's stream: connects, waits for the first snapshot, and returns
    /// the stream of updates (see [`SessionStream`]). Fails if that first connection
    /// does; after it, lost connections are recovered inside the stream.
    pub async fn follow(&self, session: &SessionId, options: StreamOptions) -> Result<SessionStream, Error> {
        SessionStream::open(self.clone(), session.clone(), options).await
    }
}

/// A session's stream of [`Update`]s; it ends only after [`Event::Failed`].
pub struct SessionStream {
    session: SessionId,
    inner: BoxStream<'static, Update>,
}

impl SessionStream {
    pub(crate) async fn open(client: Client, session: SessionId, options: StreamOptions) -> Result<Self, Error> {
        let mut body = connect(&client, &session, &options, None).await?;
        let mut decoder = Decoder::new();
        // The first frame of a connection without a cursor is the snapshot.
        let (fold, backlog) = 'first: loop {
            let chunk = match tokio::time::timeout(options.watchdog, body.next()).await {
                Ok(Some(chunk)) => chunk?,
                Ok(None) => return Err(unexpected("the stream ended before its snapshot")),
                Err(_) => return Err(unexpected("no snapshot within the watchdog's time")),
            };
            let mut events: VecDeque<SseEvent> = decoder.push(&chunk).into();
            while let Some(event) = events.pop_front() {
                if event.event.is_some() {
                    continue;
                }
                let frame: Frame =
                    serde_json::from_str(&event.data).map_err(|e| unexpected(&format!("a first frame: {e}")))?;
                let fold = Fold::from_snapshot(frame).ok_or_else(|| unexpected("the first frame is no snapshot"))?;
                break 'first (fold, events);
            }
        };
        let machine = Machine {
            delay: options.backoff_min,
            client,
            session: session.clone(),
            options,
            fold,
            want_snapshot: false,
            body: Some(body),
            decoder,
            backlog,
            retry_at: None,
            last_resync: None,
            down: false,
            pending: VecDeque::from([Event::Snapshot]),
            ended: false,
        };
        let inner = futures::stream::unfold(machine, |mut m| async move { m.step().await.map(|u| (u, m)) }).boxed();
        Ok(SessionStream { session, inner })
    }

    pub fn session_id(&self) -> &SessionId {
        &self.session
    }
}

impl Stream for SessionStream {
    type Item = Update;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Update>> {
        self.inner.poll_next_unpin(cx)
    }
}

fn unexpected(detail: &str) -> Error {
    Error::Unexpected { status: reqwest::StatusCode::OK, detail: detail.to_owned() }
}

type Body = BoxStream<'static, reqwest::Result<Bytes>>;

/// One connection attempt: the response body once the server answered 2xx.
async fn connect(
    client: &Client,
    session: &SessionId,
    options: &StreamOptions,
    cursor: Option<&Cursor>,
) -> Result<Body, Error> {
    // Presence counts this connection as a terminal client (`spool chat`), one that can
    // answer approvals when it is interactive.
    let query = if options.interactive { "?client=cli&approvals=1" } else { "?client=cli" };
    let mut request = client
        .request(reqwest::Method::GET, &format!("/api/sessions/{session}/events{query}"))
        .header(reqwest::header::ACCEPT, "text/event-stream");
    if let Some(cursor) = cursor {
        request = request.header("Last-Event-ID", cursor.to_string());
    }
    let response = request.send().await?;
    let status = response.status();
    if !status.is_success() {
        return Err(api_error(status, &read_limited(response).await?));
    }
    Ok(response.bytes_stream().boxed())
}

/// The stream's state between items.
struct Machine {
    client: Client,
    session: SessionId,
    options: StreamOptions,
    fold: Fold,
    /// The next connection asks for a snapshot (no cursor).
    want_snapshot: bool,
    body: Option<Body>,
    decoder: Decoder,
    /// Decoded events not looked at yet (the rest of the first snapshot's chunk).
    backlog: VecDeque<SseEvent>,
    /// The next delay after a lost connection.
    delay: Duration,
    /// When the next connection may be made.
    retry_at: Option<Instant>,
    last_resync: Option<Instant>,
    /// A loss or resync happened since the last connection.
    down: bool,
    pending: VecDeque<Event>,
    ended: bool,
}

impl Machine {
    /// Runs until there is something to yield.
    async fn step(&mut self) -> Option<Update> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Some(Update { event, state: self.fold.state.clone() });
            }
            if self.ended {
                return None;
            }
            if let Some(event) = self.backlog.pop_front() {
                self.handle(event);
                continue;
            }
            let Some(mut body) = self.body.take() else {
                self.reconnect().await;
                continue;
            };
            match tokio::time::timeout(self.options.watchdog, body.next()).await {
                Err(_) => {
                    // Not a failure of the server's: make the connection again at once.
                    let reason = format!("nothing arrived for {} s", self.options.watchdog.as_secs_f32());
                    self.delay = self.options.backoff_min;
                    self.down = true;
                    self.pending.push_back(Event::Disconnected { reason, retry_in: Duration::ZERO });
                }
                Ok(None) => self.fail("the server closed the stream".into()),
                Ok(Some(Err(e))) => self.fail(format!("the connection broke: {e}")),
                Ok(Some(Ok(chunk))) => {
                    self.body = Some(body);
                    self.backlog.extend(self.decoder.push(&chunk));
                }
            }
        }
    }

    async fn reconnect(&mut self) {
        if let Some(at) = self.retry_at.take() {
            tokio::time::sleep_until(at).await;
        }
        let cursor = (!self.want_snapshot).then(|| self.fold.cursor.clone());
        match connect(&self.client, &self.session, &self.options, cursor.as_ref()).await {
            Ok(body) => {
                self.body = Some(body);
                self.decoder = Decoder::new();
                if std::mem::take(&mut self.down) {
                    self.pending.push_back(Event::Reconnected);
                }
            }
            Err(e) if e.is_transient() => self.fail(e.to_string()),
            Err(e) => {
                self.pending.push_back(Event::Failed { error: e.to_string() });
                self.ended = true;
            }
        }
    }

    /// One decoded SSE event of the current connection.
    fn handle(&mut self, event: SseEvent) {
        // Any frame or heartbeat shows the connection works.
        self.delay = self.options.backoff_min;
        if event.event.is_some() {
            return; // `heartbeat`, or a named event of a later version.
        }
        let verdict = match serde_json::from_str::<Frame>(&event.data) {
            Ok(frame) => {
                let verdict = self.fold.apply(&frame);
                if verdict == Verdict::Applied {
                    if let spool_protocol::FrameBody::Snapshot { .. } = frame.body {
                        self.want_snapshot = false;
                        self.pending.push_back(Event::Snapshot);
                    } else {
                        self.pending.push_back(Event::Frame(Box::new(frame)));
                    }
                }
                verdict
            }
            // A frame type this client does not know: it still takes its place in the
            // sequence, or the next frame would look like a gap.
            Err(_) => match serde_json::from_str::<Envelope>(&event.data) {
                Ok(envelope) => self.fold.skip(&Cursor { stream_id: envelope.stream_id, seq: envelope.seq }),
                Err(e) => Verdict::Resync(format!("a frame that does not parse: {e}")),
            },
        };
        if let Verdict::Resync(reason) = verdict {
            self.resync(reason);
        }
    }

    /// Drops the connection and makes one without a cursor, which yields a snapshot.
    fn resync(&mut self, reason: String) {
        self.body = None;
        self.backlog.clear();
        self.want_snapshot = true;
        self.down = true;
        let now = Instant::now();
        let again = self.last_resync.is_some_and(|at| now.duration_since(at) < RESYNC_AGAIN);
        self.last_resync = Some(now);
        self.pending.push_back(Event::Resync { reason });
        if again {
            self.retry_at = Some(now + self.next_delay());
        }
    }

    /// The connection is lost: wait through the backoff, then connect again.
    fn fail(&mut self, reason: String) {
        self.body = None;
        self.backlog.clear();
        self.down = true;
        let wait = self.next_delay();
        self.retry_at = Some(Instant::now() + wait);
        self.pending.push_back(Event::Disconnected { reason, retry_in: wait });
    }

    /// The delay to wait now, with jitter; doubles the next one up to the maximum.
    fn next_delay(&mut self) -> Duration {
        let base = self.delay;
        self.delay = (self.delay * 2).min(self.options.backoff_max);
        let quarter = u64::try_from(base.as_millis() / 4).unwrap_or(u64::MAX);
        (base + Duration::from_millis(rand::random_range(0..=quarter))).min(self.options.backoff_max)
    }
}

/// The fields every frame has, for one whose type this client does not know.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Envelope {
    stream_id: StreamId,
    seq: u64,
}
