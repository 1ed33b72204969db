//! One subscriber of `GET /api/sessions/:id/events`: it reads the stream until the run
//! has settled, and keeps what the report needs, as cheaply as it can, because the
//! client shares the machine's cores with the nodes it measures.
//!
//! Per SSE event it reads only the `id: streamId:seq` line, the frame's `type` (the
//! first key of the JSON) and, for `loop.event` frames, whether the agent event is a
//! `text_delta` or `agent_settled`: no JSON parsing. The clock is read once per chunk
//! the socket yields, and every frame in the chunk is received at that instant (the
//! moment the client could first see it). Receive instants are kept for every
//! `sample_every`-th seq only; the seq of a frame is the same on every node, so every
//! subscriber samples the same frames.
//!
//! It also checks the stream a user would rely on: within one connection each frame's
//! seq is the previous one's plus one and the stream id does not change (a snapshot
//! frame may jump: it replaces everything before it). Holes, repeats and stream
//! changes are counted, not fatal, so a run shows how often they happen.

use anyhow::{Result, bail};
use futures::StreamExt;
use memchr::memmem::{self, Finder};
use std::time::Instant;

const SNAPSHOT: &[u8] = b"session.snapshot";
const LOOP_EVENT: &[u8] = b"loop.event";

pub struct Outcome {
    /// Index of the node this subscriber reads from.
    pub node: usize,
    /// Business frames (those with an SSE id) over all connections.
    pub frames: u64,
    /// `text_delta` frames over all connections.
    pub deltas: u64,
    /// Run stream: `snapshot` events (a late subscriber whose missed frames had left the
    /// session's buffer gets the text so far in one, instead of as deltas).
    pub snapshots: u64,
    /// Times the stream ended under the subscriber and it reconnected (the server cuts a
    /// subscriber that lags; nothing else should end a stream).
    pub reconnects: u32,
    /// It saw the run settle before the deadline.
    pub finished: bool,
    /// Seqs skipped within a connection with no snapshot in between.
    pub missing: u64,
    /// Frames whose seq was not above the previous frame's.
    pub repeated: u64,
    /// Frames whose stream id differed from the previous frame's, with no snapshot.
    pub stream_changes: u64,
    /// Stream id of the first delta, to compare across nodes.
    pub stream_id: Option<String>,
    /// `(seq, received)` of the deltas whose seq is a multiple of `sample_every`.
    pub samples: Vec<(u64, Instant)>,
    /// When the first delta arrived.
    pub first_delta: Option<Instant>,
    /// When the last delta arrived.
    pub last_delta: Option<Instant>,
}

impl Outcome {
    /// Nothing received yet, from node `node`.
    pub fn new(node: usize) -> Self {
        Outcome {
            node,
            frames: 0,
            deltas: 0,
            snapshots: 0,
            reconnects: 0,
            finished: false,
            missing: 0,
            repeated: 0,
            stream_changes: 0,
            stream_id: None,
            samples: Vec::new(),
            first_delta: None,
            last_delta: None,
        }
    }
}

pub struct Subscriber {
    pub client: reqwest::Client,
    pub url: String,
    pub node: usize,
    pub sample_every: u64,
    /// Told once: when the first frame (the snapshot) has arrived, or why the stream
    /// could not be opened.
    pub ready: tokio::sync::mpsc::Sender<Result<(), String>>,
    /// A subscriber still reading then gives up and reports itself unfinished.
    pub deadline: tokio::time::Instant,
}

/// Reads the stream until the run has settled. A subscriber the server cuts does what a
/// browser does: it reconnects, here without a cursor so it gets a snapshot (the fast
/// way back for a client that fell far behind). It is done when it sees
/// `agent_settled`, or a snapshot with no active run (the run settled while it was away).
pub async fn run(sub: Subscriber) -> Result<Outcome> {
    let mut outcome = Outcome::new(sub.node);
    let finders = Finders::new();
    let mut announced = false;
    loop {
        let resp = match connect(&sub.client, &sub.url).await {
            Ok(resp) => resp,
            Err(e) => {
                if !announced {
                    let _ = sub.ready.send(Err(format!("{e:#}"))).await;
                }
                return Err(e);
            }
        };
        let mut body = resp.bytes_stream();
        let mut events = Events::default();
        let mut conn = Connection { reconnected: outcome.reconnects > 0, ..Connection::default() };
        loop {
            let chunk = match tokio::time::timeout_at(sub.deadline, body.next()).await {
                Err(_) => return Ok(outcome),
                Ok(Some(Ok(chunk))) => chunk,
                Ok(None | Some(Err(_))) => break,
            };
            let at = Instant::now();
            events.feed(&chunk, |event| conn.frame(event, at, &finders, sub.sample_every, &mut outcome));
            if !announced && outcome.frames > 0 {
                announced = true;
                let _ = sub.ready.send(Ok(())).await;
            }
            if conn.done {
                outcome.finished = true;
                return Ok(outcome);
            }
        }
        outcome.reconnects += 1;
    }
}

/// Opens the stream; a refusal is an error with the server's answer in it (a 429 says
/// which limit was hit).
async fn connect(client: &reqwest::Client, url: &str) -> Result<reqwest::Response> {
    let resp = client.get(url).send().await?;
    let status = resp.status();
    if !status.is_success() {
        let body = resp.text().await.unwrap_or_default();
        bail!("GET {url}: {status}: {body}");
    }
    Ok(resp)
}

struct Finders {
    text_delta: Finder<'static>,
    settled: Finder<'static>,
    idle: Finder<'static>,
}

impl Finders {
    fn new() -> Self {
        Self {
            text_delta: Finder::new(b"\"type\":\"text_delta\""),
            settled: Finder::new(b"\"type\":\"agent_settled\""),
            idle: Finder::new(b"\"activeRun\":null"),
        }
    }
}

/// The state of one connection: the previous frame's place in the stream.
#[derive(Default)]
struct Connection {
    stream: Vec<u8>,
    seq: Option<u64>,
    reconnected: bool,
    done: bool,
}

impl Connection {
    fn frame(&mut self, event: &[u8], at: Instant, finders: &Finders, sample_every: u64, outcome: &mut Outcome) {
        // Heartbeats and comments carry no id; they are not frames of the session.
        let Some((stream, seq, data)) = split_id(event) else { return };
        outcome.frames += 1;
        let kind = frame_type(data);
        let first = self.seq.is_none();
        if kind == SNAPSHOT {
            // Back after a cut, the run settled meanwhile: nothing more will come.
            if first && self.reconnected && finders.idle.find(data).is_some() {
                self.done = true;
            }
        } else if let Some(prev) = self.seq {
            if stream != self.stream.as_slice() {
                outcome.stream_changes += 1;
            } else if seq <= prev {
                outcome.repeated += 1;
            } else {
                outcome.missing += seq - prev - 1;
            }
        }
        if stream != self.stream.as_slice() {
            self.stream = stream.to_vec();
        }
        self.seq = Some(seq);
        if kind != LOOP_EVENT {
            return;
        }
        if finders.text_delta.find(data).is_some() {
            outcome.deltas += 1;
            outcome.first_delta.get_or_insert(at);
            outcome.last_delta = Some(at);
            if seq % sample_every == 0 {
                outcome.samples.push((seq, at));
            }
            if outcome.stream_id.is_none() {
                outcome.stream_id = Some(String::from_utf8_lossy(stream).into_owned());
            }
        } else if finders.settled.find(data).is_some() {
            self.done = true;
        }
    }
}

/// `(streamId, seq, rest)` of an event that starts with `id: streamId:seq`.
pub(crate) fn split_id(event: &[u8]) -> Option<(&[u8], u64, &[u8])> {
    let rest = event.strip_prefix(b"id: ")?;
    let end = memchr::memchr(b'\n', rest)?;
    let (line, data) = (&rest[..end], &rest[end + 1..]);
    let colon = memchr::memrchr(b':', line)?;
    let seq = std::str::from_utf8(&line[colon + 1..]).ok()?.parse().ok()?;
    Some((&line[..colon], seq, data))
}

/// The frame's `type`: the first key of its JSON (the tag is serialized first).
pub(crate) fn frame_type(data: &[u8]) -> &[u8] {
    let Some(rest) = data.strip_prefix(b"data: {\"type\":\"") else { return b"" };
    memchr::memchr(b'"', rest).map_or(b"", |end| &rest[..end])
}

/// Splits a byte stream into SSE events (blank-line separated) across chunk boundaries.
/// The server writes `\n` line ends only.
#[derive(Default)]
pub(crate) struct Events {
    pending: Vec<u8>,
}

impl Events {
    pub(crate) fn feed(&mut self, chunk: &[u8], mut each: impl FnMut(&[u8])) {
        self.pending.extend_from_slice(chunk);
        let mut start = 0;
        for end in memmem::find_iter(&self.pending, b"\n\n") {
            each(&self.pending[start..end]);
            start = end + 2;
        }
        self.pending.drain(..start);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_split_across_chunks_and_frames_are_read_from_their_first_bytes() {
        let mut events = Events::default();
        let mut seen = Vec::new();
        let wire: &[&[u8]] =
            &[b"id: str_1:7\ndata: {\"type\":\"loop.ev", b"ent\",\"x\":1}\n", b"\nevent: heartbeat\ndata: {}\n\n"];
        for chunk in wire {
            events.feed(chunk, |e| seen.push(e.to_vec()));
        }
        assert_eq!(seen.len(), 2);
        let (stream, seq, data) = split_id(&seen[0]).expect("an id");
        assert_eq!((stream, seq, frame_type(data)), (&b"str_1"[..], 7, LOOP_EVENT));
        assert_eq!(split_id(&seen[1]), None, "a heartbeat has no id");
    }

    #[test]
    fn holes_repeats_and_stream_changes_are_counted_and_a_snapshot_may_jump() {
        let frame = |stream: &str, seq: u64, kind: &str| format!("id: {stream}:{seq}\ndata: {{\"type\":\"{kind}\"}}");
        let outcome = run_frames(&[
            frame("a", 1, "session.snapshot"),
            frame("a", 2, "session.state"),
            frame("a", 4, "session.state"),
            frame("a", 4, "session.state"),
            frame("b", 5, "session.state"),
            frame("b", 9, "session.snapshot"),
            frame("b", 10, "session.state"),
        ]);
        assert_eq!((outcome.missing, outcome.repeated, outcome.stream_changes), (1, 1, 1));
        assert_eq!(outcome.frames, 7);
    }

    #[test]
    fn deltas_are_sampled_by_seq_and_settled_ends_the_connection() {
        let delta =
            |seq: u64| format!("id: s:{seq}\ndata: {{\"type\":\"loop.event\",\"event\":{{\"type\":\"text_delta\"}}}}");
        let mut frames: Vec<String> = (1..=25).map(delta).collect();
        frames.push("id: s:26\ndata: {\"type\":\"loop.event\",\"event\":{\"type\":\"agent_settled\"}}".into());
        let outcome = run_frames(&frames);
        assert_eq!(outcome.deltas, 25);
        assert_eq!(outcome.samples.iter().map(|(seq, _)| *seq).collect::<Vec<_>>(), [10, 20]);
        assert_eq!(outcome.stream_id.as_deref(), Some("s"));
        assert!(outcome.finished);
    }

    fn run_frames(frames: &[String]) -> Outcome {
        let mut outcome = Outcome::new(0);
        let (finders, mut conn, at) = (Finders::new(), Connection::default(), Instant::now());
        for f in frames {
            conn.frame(f.as_bytes(), at, &finders, 10, &mut outcome);
        }
        outcome.finished = conn.done;
        outcome
    }
}
