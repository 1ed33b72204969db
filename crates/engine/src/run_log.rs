//! The run frame log: every session-stream frame of a run, from its `run.accepted`
//! through its last run-stream event (`done` or `error`), kept in the store
//! ([`RunFrames`]) so the run replays exactly long after its frames left the
//! in-memory ring, and across restarts. A replay folds these very frames, so it gives a
//! client the bytes a live follower got.
//!
//! # Writing
//!
//! A session stream that logs ([`SessionEvents::log_runs`](crate::SessionEvents))
//! holds a [`RunLogger`] under its lock. As each frame enters the ring it hands the
//! frame (an `Arc`, no copy, no serialization under the lock) to one bounded channel
//! per engine with `try_send`: the publisher never waits on the database. One writer
//! task drains the channel, encodes each frame as a JSON line `{"s":seq,"r":runSeq,
//! "f":body}` and writes a chunk, deflated, every [`CHUNK_FRAMES`] frames (half the
//! default ring, so the log and the ring overlap) or [`CHUNK_BYTES`], and at the run's
//! end, whose chunk says `complete`. Every [`FLUSH_EVERY`] the open chunk is written as
//! it stands (and rewritten as it grows), so a crash loses little of a slow run.
//!
//! # Never wrong
//!
//! Frames carry their number within the run's window. A frame the channel could not
//! take, a write that failed, a run cut short by a newer one or by a restart: the
//! writer sees the gap or never sees the end, and no chunk of that run says
//! `complete`. [`read`] accepts a log only when its chunks are numbered without a gap,
//! their seqs follow one another and the last one is complete; anything else reads as
//! `None`, and the caller shows a snapshot as before.
//!
//! # Reading
//!
//! [`read`] gives a run's whole log; [`Engine::follow_logged`](crate::Engine) the run
//! stream's replay: the whole log, or for a run still going the frames logged so far
//! joined to the live stream right after the last of them; `RunLog::after_cursor`
//! finds the logged run holding a session-stream cursor's next frame (the session
//! stream's, see `events/from_log.rs`). A reader whose run ended a moment ago waits
//! (bounded) for the writer to store its last chunk, so it gets the log, not a snapshot.
//! The log is written in chunks, so what it holds of a run still going may end before
//! the ring begins: the reader reads it again as the writer flushes (at most
//! [`JOIN_WAIT`]), and takes the snapshot if it still cannot join. Never a hole.
//!
//! # Bus mode (several nodes)
//!
//! Every node's ring is filled from the bus, under the bus's cursors, so every node
//! sees every frame; exactly one logs a run: the node whose own instance published
//! the run's `run.accepted`, which is the node running it (it holds the session's
//! lease). It logs the frames as they come back from the bus, with the bus's seqs, so a
//! cursor a client got from any node finds its frame in the log. Every node reads the
//! logs from the shared store; a node joining a logged run to its own ring fills the
//! ring from the bus's log first (`SessionEvents::backfill`). A bus `Reset` (frames may
//! be missing) abandons the run being logged: its log never says `complete`. A run
//! whose decision another node resumes stays logged by the node that started it, as
//! long as it follows the session.

use crate::run_sequence::RunSequences;
use crate::store::{RunFrameChunk, Store, StoreError};
use flate2::Compression;
use flate2::read::DeflateDecoder;
use flate2::write::DeflateEncoder;
use serde::{Deserialize, Serialize};
use spool_protocol::frame::{Frame, FrameBody};
use spool_protocol::{RunId, SessionId, StreamId};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// Frames per chunk: half the default ring (256), so every frame is in the ring or the
/// log while a run goes on.
pub const CHUNK_FRAMES: usize = 128;
/// Most encoded (not yet deflated) bytes a chunk gathers before it is written.
pub const CHUNK_BYTES: usize = 256 * 1024;
/// How long an open chunk waits at most, so a crash loses little of a slow run.
pub const FLUSH_EVERY: Duration = Duration::from_secs(2);
/// Frames waiting for the writer across all sessions; past it, runs lose their log.
const QUEUE: usize = 4096;

/// One message from a session stream to the writer.
enum Logged {
    Start { run: RunId, session: SessionId, stream: StreamId },
    Frame { run: RunId, n: u64, run_seq: Option<u64>, frame: Arc<Frame> },
    End { run: RunId, frames: u64 },
}

/// The engine's handle on the writer task: cheap to clone, one per session stream.
#[derive(Clone)]
pub struct RunLog {
    tx: mpsc::Sender<Logged>,
    store: Arc<dyn Store>,
    ending: Ending,
}

/// Runs whose end was handed to the writer and whose last chunk is not written yet,
/// and a counter the writer bumps after each end it writes: what a reader in the few
/// milliseconds after a run ended waits on, so it gets the log, not a snapshot.
#[derive(Clone, Default)]
struct Ending {
    /// A std mutex: held for one set operation, never across an await.
    runs: Arc<std::sync::Mutex<std::collections::HashSet<RunId>>>,
    written: Arc<tokio::sync::watch::Sender<u64>>,
}

impl Ending {
    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<RunId>> {
        self.runs.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn done(&self, run: &RunId) {
        self.lock().remove(run);
        self.written.send_modify(|n| *n += 1);
    }
}

/// How long a reader waits at most for a run's last chunk that is on its way.
const SETTLE_WAIT: Duration = Duration::from_secs(2);

/// How many of a session's latest runs a cursor outside the ring is looked for in.
const LOOK_BACK: usize = 16;

impl RunLog {
    /// Starts the writer task, which ends once every handle is dropped.
    pub fn start(store: Arc<dyn Store>) -> Self {
        let (tx, rx) = mpsc::channel(QUEUE);
        let ending = Ending::default();
        tokio::spawn(writer(store.clone(), rx, ending.clone()));
        Self { tx, store, ending }
    }

    /// Waits (at most [`SETTLE_WAIT`]) until the last chunk of `run`, if its end was
    /// handed over, is written.
    async fn settled(&self, run: &RunId) {
        let mut written = self.ending.written.subscribe();
        let wait = async {
            while self.ending.lock().contains(run) {
                if written.changed().await.is_err() {
                    return;
                }
            }
        };
        let _ = tokio::time::timeout(SETTLE_WAIT, wait).await;
    }

    /// The whole log of `run` once its end is written (see [`read`]).
    pub async fn read(&self, run: &RunId) -> Result<Option<Vec<Arc<Frame>>>, StoreError> {
        self.settled(run).await;
        read(&*self.store, run).await
    }

    /// The frames of `run`'s log written so far, from its `run.accepted` on, each chunk
    /// checked as [`read`] does, with how far they reach. `None` when nothing whole is
    /// logged. A run whose end was handed over here is waited for.
    pub(crate) async fn read_open(&self, run: &RunId) -> Result<Option<(Vec<Arc<Frame>>, Reach)>, StoreError> {
        self.settled(run).await;
        let chunks = self.store.run_frames(run).await?;
        Ok(decode(&chunks, false).ok().map(|frames| (frames, Reach::of(&chunks))))
    }

    /// The logged frames of `session` after `cursor`: those of the one run whose window
    /// holds the frame right after it, from that frame on, in order, with how far they
    /// reach. A run still being logged gives the frames written so far, when `open`
    /// allows it: none, when its log has not reached the cursor yet. `None` when no
    /// logged run (among the session's latest [`LOOK_BACK`]) holds that frame: a cursor
    /// in a gap between runs, or a log that is not whole.
    pub(crate) async fn after_cursor(
        &self,
        session: &SessionId,
        cursor: &spool_protocol::Cursor,
        open: bool,
    ) -> Result<Option<(Vec<Arc<Frame>>, Reach)>, StoreError> {
        let next = cursor.seq + 1;
        let runs = self.store.runs_since(session, 0).await?;
        for run in runs.iter().rev().take(LOOK_BACK) {
            let mut chunks = self.store.run_frames(&run.id).await?;
            let (Some(first), Some(last)) = (chunks.first(), chunks.last()) else { continue };
            if first.stream_id != cursor.stream_id || first.first_seq > next {
                continue;
            }
            if last.last_seq < next && last.complete {
                // Runs are in order: every older one ends before this one.
                return Ok(None);
            }
            if !last.complete && !open {
                return Ok(None);
            }
            if !last.complete {
                // Its end may be on its way to the store right now.
                self.settled(&run.id).await;
                chunks = self.store.run_frames(&run.id).await?;
            }
            let reach = Reach::of(&chunks);
            let Ok(mut frames) = decode(&chunks, reach == Reach::Whole) else { return Ok(None) };
            frames.retain(|f| f.seq > cursor.seq);
            if frames.is_empty() && reach != Reach::Whole {
                return Ok(Some((frames, reach)));
            }
            let follows = frames.first().is_some_and(|f| f.seq == next && f.stream_id == cursor.stream_id);
            return Ok(follows.then_some((frames, reach)));
        }
        Ok(None)
    }

    /// Hands a message over without waiting; false when the queue is full (or the
    /// writer gone).
    fn offer(&self, message: Logged) -> bool {
        self.tx.try_send(message).is_ok()
    }
}

/// A session stream's side of the log: which run's window is open.
pub(crate) struct RunLogger {
    log: RunLog,
    open: Option<OpenRun>,
}

struct OpenRun {
    run: RunId,
    /// Frames handed over so far.
    n: u64,
    /// A frame could not be handed over: the writer will see a gap, so stop sending.
    lost: bool,
}

impl RunLogger {
    pub(crate) fn new(log: RunLog) -> Self {
        Self { log, open: None }
    }

    /// The log this stream writes to, which also reads it back.
    pub(crate) fn log(&self) -> &RunLog {
        &self.log
    }

    /// Called for every frame as it enters the ring, after `runs` counted it (`mark`).
    /// `own`: this instance published the frame; a run's window opens only on its own
    /// `run.accepted` (bus mode: every node sees the frame, one node runs the run).
    pub(crate) fn frame(&mut self, frame: &Arc<Frame>, mark: Option<&(RunId, u64)>, runs: &RunSequences, own: bool) {
        if let FrameBody::RunAccepted { run_id, .. } = &frame.body
            && mark.is_some_and(|(run, seq)| run == run_id && *seq == 1)
        {
            if !own {
                // Another node runs it and logs it; one still open here stays incomplete.
                self.open = None;
                return;
            }
            // A run's window opens; one still open (it never ended here) stays incomplete.
            let start = Logged::Start {
                run: run_id.clone(),
                session: frame.session_id.clone(),
                stream: frame.stream_id.clone(),
            };
            let lost = !self.log.offer(start);
            self.open = Some(OpenRun { run: run_id.clone(), n: 0, lost });
        }
        let Some(open) = &mut self.open else { return };
        if !open.lost {
            let run_seq = mark.filter(|(run, _)| *run == open.run).map(|(_, seq)| *seq);
            let message = Logged::Frame { run: open.run.clone(), n: open.n, run_seq, frame: frame.clone() };
            open.lost = !self.log.offer(message);
        }
        open.n += 1;
        if runs.get(&open.run).is_none_or(|count| count.ended()) {
            // A lost frame already left a gap the writer will see; the end says how many.
            self.log.ending.lock().insert(open.run.clone());
            if !self.log.offer(Logged::End { run: open.run.clone(), frames: open.n }) {
                self.log.ending.done(&open.run);
            }
            self.open = None;
        }
    }
}

impl RunLogger {
    /// The stream lost its place (bus mode, a `Reset`): frames of the open run may be
    /// missing, so it is never logged whole.
    pub(crate) fn abandon(&mut self) {
        self.open = None;
    }
}

/// One line of a chunk.
#[derive(Serialize)]
struct Line<'a> {
    s: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    r: Option<u64>,
    f: &'a FrameBody,
}

#[derive(Deserialize)]
struct ReadLine {
    s: u64,
    f: FrameBody,
}

/// A run the writer is logging.
struct Writing {
    session: SessionId,
    stream: StreamId,
    /// The number the next frame must have.
    n: u64,
    /// A gap or a failed write: nothing more is written, no chunk says complete.
    broken: bool,
    next_chunk: u64,
    /// The open chunk: encoded lines, how many, their first and last seq.
    lines: Vec<u8>,
    frames: u64,
    first_seq: u64,
    last_seq: u64,
    /// The open chunk has frames not written yet.
    dirty: bool,
}

async fn writer(store: Arc<dyn Store>, mut rx: mpsc::Receiver<Logged>, ending: Ending) {
    let mut runs: HashMap<RunId, Writing> = HashMap::new();
    let mut tick = tokio::time::interval(FLUSH_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let message = tokio::select! {
            message = rx.recv() => match message {
                Some(message) => message,
                None => return,
            },
            _ = tick.tick() => {
                for (run, writing) in runs.iter_mut().filter(|(_, w)| w.dirty) {
                    write(&*store, run, writing, false).await;
                }
                continue;
            }
        };
        match message {
            Logged::Start { run, session, stream } => {
                // One run at a time per session: an earlier one still open never ended here.
                runs.retain(|_, w| w.session != session);
                let writing = Writing {
                    session,
                    stream,
                    n: 0,
                    broken: false,
                    next_chunk: 0,
                    lines: Vec::new(),
                    frames: 0,
                    first_seq: 0,
                    last_seq: 0,
                    dirty: false,
                };
                runs.insert(run, writing);
            }
            Logged::Frame { run, n, run_seq, frame } => {
                let Some(writing) = runs.get_mut(&run) else { continue };
                if writing.broken {
                    continue;
                }
                if n != writing.n || frame.stream_id != writing.stream {
                    writing.broken = true;
                    continue;
                }
                writing.n += 1;
                // A full chunk is written and closed when the next frame comes, so the
                // run's end always finds frames to write with `complete`.
                if writing.frames as usize >= CHUNK_FRAMES || writing.lines.len() >= CHUNK_BYTES {
                    if !write(&*store, &run, writing, false).await {
                        continue;
                    }
                    writing.next_chunk += 1;
                    writing.lines.clear();
                    writing.frames = 0;
                }
                if writing.frames == 0 {
                    writing.first_seq = frame.seq;
                }
                writing.last_seq = frame.seq;
                writing.frames += 1;
                let line = Line { s: frame.seq, r: run_seq, f: &frame.body };
                serde_json::to_writer(&mut writing.lines, &line).expect("frames are plain data and always serialize");
                writing.lines.push(b'\n');
                writing.dirty = true;
            }
            Logged::End { run, frames } => {
                if let Some(mut writing) = runs.remove(&run) {
                    if frames != writing.n {
                        writing.broken = true;
                    }
                    write(&*store, &run, &mut writing, true).await;
                }
                ending.done(&run);
            }
        }
    }
}

/// Writes the open chunk as it is (the run's last, when `complete`); writing it again
/// later, with more frames, replaces it. False when the run's log is broken.
async fn write(store: &dyn Store, run: &RunId, writing: &mut Writing, complete: bool) -> bool {
    if writing.broken || writing.frames == 0 {
        return false;
    }
    let chunk = RunFrameChunk {
        run_id: run.clone(),
        chunk: writing.next_chunk,
        session_id: writing.session.clone(),
        stream_id: writing.stream.clone(),
        first_seq: writing.first_seq,
        last_seq: writing.last_seq,
        frames: writing.frames,
        complete,
        data: deflate(&writing.lines),
        created_at: spool_protocol::time::now_ms(),
    };
    if let Err(error) = store.append_run_frames(&chunk).await {
        tracing::warn!(%run, %error, "could not write the run's frame log; it replays from a snapshot");
        writing.broken = true;
        return false;
    }
    writing.dirty = false;
    true
}

/// Deflates a chunk's lines.
pub fn deflate(lines: &[u8]) -> Vec<u8> {
    let mut encoder = DeflateEncoder::new(Vec::with_capacity(lines.len() / 4), Compression::default());
    encoder.write_all(lines).expect("writing to a Vec cannot fail");
    encoder.finish().expect("writing to a Vec cannot fail")
}

/// A chunk's lines, inflated; `None` when the bytes are not a deflated text.
pub fn inflate(data: &[u8]) -> Option<String> {
    let mut text = String::new();
    DeflateDecoder::new(data).read_to_string(&mut text).ok()?;
    Some(text)
}

/// The frames of `run`'s log, in order, when the log is whole: its chunks numbered
/// from 0 without a gap, each chunk's seqs following the last's, its frames as many
/// as the row says, and the last chunk complete. `None` otherwise (never logged,
/// pruned, cut short, damaged): the caller falls back to a snapshot.
pub async fn read(store: &dyn Store, run: &RunId) -> Result<Option<Vec<Arc<Frame>>>, StoreError> {
    let chunks = store.run_frames(run).await?;
    Ok(decode(&chunks, true).inspect_err(|why| tracing::debug!(%run, why, "no whole frame log")).ok())
}

/// The frames of `chunks`, checked as [`read`] says; with `whole` false, a log whose
/// end is not written yet gives the frames written so far (each chunk still checked).
fn decode(chunks: &[RunFrameChunk], whole: bool) -> Result<Vec<Arc<Frame>>, &'static str> {
    let last = chunks.last().ok_or("no chunk")?;
    if whole && !last.complete {
        return Err("the last chunk is not the run's end");
    }
    let mut frames = Vec::new();
    let mut next_seq = chunks[0].first_seq;
    for (i, chunk) in chunks.iter().enumerate() {
        if chunk.chunk != i as u64 || (chunk.complete && i + 1 != chunks.len()) {
            return Err("a chunk is missing");
        }
        if chunk.first_seq != next_seq || chunk.stream_id != last.stream_id {
            return Err("the chunks' frames do not follow one another");
        }
        let text = inflate(&chunk.data).ok_or("a chunk does not inflate")?;
        let before = frames.len();
        for line in text.lines() {
            let line: ReadLine = serde_json::from_str(line).map_err(|_| "a line does not parse")?;
            if line.s != next_seq {
                return Err("a frame is missing");
            }
            next_seq += 1;
            let frame = Frame {
                body: line.f,
                session_id: chunk.session_id.clone(),
                stream_id: chunk.stream_id.clone(),
                seq: line.s,
            };
            frames.push(Arc::new(frame));
        }
        if (frames.len() - before) as u64 != chunk.frames || next_seq != chunk.last_seq + 1 {
            return Err("a chunk holds other frames than it says");
        }
    }
    Ok(frames)
}

/// How often retention deletes old logs.
const PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// A run read from its frame log, for a run-stream client whose place left the ring:
/// the run's frames from its `run.accepted`, and where they go on.
pub struct LoggedRun {
    pub frames: Vec<Arc<Frame>>,
    /// The log is whole: the frames reach the run's end, and `then` (at the stream's
    /// head) has nothing of the run.
    pub whole: bool,
    /// Otherwise the run goes on (or its end is not logged yet), and this subscription
    /// starts right after the last of `frames`: nothing missing, nothing twice.
    pub then: crate::Subscription,
}

/// How far a run's log reaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reach {
    /// To the run's end.
    Whole,
    /// Not to its end, and written lately: a writer is at work and flushes again.
    Writing,
    /// Not to its end, and not written for longer than a writer waits between flushes:
    /// nothing more will come (a crash, a lost frame, a node gone). Waiting is useless.
    Stale,
}

impl Reach {
    fn of(chunks: &[RunFrameChunk]) -> Reach {
        let Some(last) = chunks.last() else { return Reach::Stale };
        let quiet = spool_protocol::time::now_ms().saturating_sub(last.created_at);
        match last.complete {
            true => Reach::Whole,
            false if quiet <= (FLUSH_EVERY + Duration::from_secs(1)).as_millis() as i64 => Reach::Writing,
            false => Reach::Stale,
        }
    }
}

/// How long a reader whose log cannot join the ring yet (its open chunk is not written)
/// waits for the writer's next flush, re-reading every [`JOIN_POLL`].
pub(crate) const JOIN_WAIT: Duration = Duration::from_millis(FLUSH_EVERY.as_millis() as u64 + 1500);
pub(crate) const JOIN_POLL: Duration = Duration::from_millis(50);

impl crate::Engine {
    /// The whole frame log of `run` (a run the caller already read, so its owner is
    /// checked), or `None` when there is no whole log.
    pub async fn run_frames(&self, run: &spool_protocol::Run) -> Result<Option<Vec<Arc<Frame>>>, crate::EngineError> {
        Ok(self.inner.run_log.read(&run.id).await?)
    }

    /// `run` (the caller read it, so its owner is checked) from its frame log: whole,
    /// or, while it goes on, the frames logged so far joined to the live stream (see
    /// [`LoggedRun`]). The log is written in chunks, so the frames it holds may end
    /// before the ring begins: then it is read again, for at most [`JOIN_WAIT`], as the
    /// writer (on this node, or on the node running the run) flushes. `None` when
    /// there is no log to read or it never joins: the caller shows a snapshot.
    pub async fn follow_logged(
        &self,
        run: &spool_protocol::Run,
        kill: tokio_util::sync::CancellationToken,
        viewer: crate::Viewer,
    ) -> Result<Option<LoggedRun>, crate::EngineError> {
        let loaded = self.load(&run.owner_id, &run.session_id).await?;
        let permit = self.stream_permit(&run.owner_id)?;
        let deadline = tokio::time::Instant::now() + JOIN_WAIT;
        loop {
            let Some((frames, reach)) = self.inner.run_log.read_open(&run.id).await? else { return Ok(None) };
            if reach == Reach::Whole {
                let head = loaded.events.head();
                let (mut then, _) = loaded.events.subscribe(Some(&head), kill, viewer);
                then.hold(permit);
                return Ok(Some(LoggedRun { frames, whole: true, then }));
            }
            let last = frames.last().expect("a decoded log holds a frame");
            let join = spool_protocol::Cursor { stream_id: last.stream_id.clone(), seq: last.seq };
            if let Some(mut then) = loaded.events.subscribe_joined(&join, kill.clone(), viewer).await {
                then.hold(permit);
                return Ok(Some(LoggedRun { frames, whole: false, then }));
            }
            let hopeless = reach == Reach::Stale || join.stream_id != loaded.events.stream_id();
            if hopeless || tokio::time::Instant::now() >= deadline {
                return Ok(None);
            }
            tokio::time::sleep(JOIN_POLL).await;
        }
    }

    /// Deletes frame logs older than the retention setting, now and every hour.
    pub(crate) fn spawn_frame_log_pruning(&self) {
        let Some(keep) = self.inner.config.frame_log_retention else { return };
        self.spawn_every(PRUNE_EVERY, move |engine| async move {
            let before = engine.inner.config.clock.now_ms().saturating_sub(crate::clock::millis(keep));
            match engine.inner.store.prune_run_frames(before).await {
                Ok(0) => {}
                Ok(pruned) => tracing::info!(pruned, "pruned run frame logs past their retention"),
                Err(error) => tracing::warn!(%error, "could not prune run frame logs"),
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use spool_protocol::{AgentEvent, StreamDelta};

    fn frames(run: &RunId, stream: &StreamId, session: &SessionId, n: u64) -> Vec<Arc<Frame>> {
        (1..=n)
            .map(|seq| {
                let event = AgentEvent::MessageUpdate {
                    assistant_message_event: StreamDelta::TextDelta {
                        content_index: 0,
                        offset: seq as usize,
                        delta: format!(" w{seq} ünï"),
                    },
                };
                let body =
                    FrameBody::LoopEvent { run_id: run.clone(), message_index: Some(1), message_id: None, event };
                Arc::new(Frame { body, session_id: session.clone(), stream_id: stream.clone(), seq })
            })
            .collect()
    }

    /// Chunks as the writer makes them: `per` frames each, the last one complete.
    fn chunks(run: &RunId, frames: &[Arc<Frame>], per: usize) -> Vec<RunFrameChunk> {
        let count = frames.len().div_ceil(per);
        frames
            .chunks(per)
            .enumerate()
            .map(|(i, part)| {
                let mut lines = Vec::new();
                for frame in part {
                    serde_json::to_writer(&mut lines, &Line { s: frame.seq, r: Some(frame.seq), f: &frame.body })
                        .expect("serializes");
                    lines.push(b'\n');
                }
                RunFrameChunk {
                    run_id: run.clone(),
                    chunk: i as u64,
                    session_id: part[0].session_id.clone(),
                    stream_id: part[0].stream_id.clone(),
                    first_seq: part[0].seq,
                    last_seq: part[part.len() - 1].seq,
                    frames: part.len() as u64,
                    complete: i + 1 == count,
                    data: deflate(&lines),
                    created_at: 1,
                }
            })
            .collect()
    }

    #[test]
    fn a_log_reads_back_only_when_it_is_whole() {
        let (run, stream, session) = (RunId::new(), StreamId::new(), SessionId::new());
        let all = frames(&run, &stream, &session, 300);
        let whole = chunks(&run, &all, CHUNK_FRAMES);
        assert_eq!(whole.len(), 3);
        assert_eq!(decode(&whole, true), Ok(all.clone()), "every frame, exactly");

        let broken = |change: &dyn Fn(&mut Vec<RunFrameChunk>)| {
            let mut log = whole.clone();
            change(&mut log);
            decode(&log, true)
        };
        assert!(broken(&|log| log[2].complete = false).is_err(), "no end");
        assert!(broken(&|log| drop(log.remove(1))).is_err(), "a chunk missing");
        assert!(broken(&|log| drop(log.pop())).is_err(), "the last chunk missing");
        assert!(broken(&|log| log[1].frames -= 1).is_err(), "a chunk holding other frames than it says");
        assert!(broken(&|log| log[0].data.truncate(10)).is_err(), "damaged bytes");
        assert!(broken(&|log| log[2].stream_id = StreamId::new()).is_err(), "frames of another stream");
        assert!(broken(&|log| log.clear()).is_err(), "nothing logged");
        // A frame missing inside a chunk: the seqs tell.
        let mut gap = all.clone();
        gap.remove(200);
        let mut log = chunks(&run, &gap, CHUNK_FRAMES);
        log[1].last_seq += 1;
        assert!(decode(&log, true).is_err(), "a frame missing");
    }
}
