//! What one `spool-bench nodes` subscriber reads off its socket, and the check it keeps
//! on its session's frames across every connection it makes.
//!
//! [`Body`] undoes HTTP/1.1 chunked transfer coding (every session stream is chunked,
//! through hyper or the lean event-stream path) and cuts what it yields into SSE events
//! at blank lines, across reads. It keeps only a partial event between reads.
//!
//! [`Track`] is the subscriber's place in its session's stream (the cursor it resumes
//! from) and its tally of what went wrong: a connection opened without a cursor must
//! start with a `session.snapshot`; every frame after that, on this connection or the
//! next one (opened with `Last-Event-ID`), must be the previous frame's seq plus one on
//! the same stream. A hole counts its missing seqs, a seq at or below the previous one
//! is a repeat, a snapshot anywhere but in its place (the previous seq plus one) is a
//! resync: the server could not replay from the cursor. Any of them is a lost or
//! duplicated frame for the report.

use crate::subscriber::{frame_type, split_id};
use memchr::memmem;

const SNAPSHOT: &[u8] = b"session.snapshot";
const RUN_ACCEPTED: &[u8] = b"run.accepted";
const PRESENCE: &[u8] = b"session.presence";
const LOOP_EVENT: &[u8] = b"loop.event";

/// A partial event kept past this many bytes of capacity is given back after use, so
/// one large snapshot does not stay allocated for the connection's life.
const KEEP_CAPACITY: usize = 4096;

/// The state of a chunked body between reads.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Chunk {
    /// Reading a chunk-size line: the hex digits so far.
    Size(u64),
    /// Past the size's digits (an extension): skipping to the line's end.
    SizeRest(u64),
    /// Inside a chunk's data: bytes left.
    Data(u64),
    /// After a chunk's data: the `\r\n` that ends it.
    DataEnd,
    /// The last (zero-size) chunk has come: the body is over.
    Done,
}

/// A chunked body cut into SSE events.
pub struct Body {
    chunk: Chunk,
    pending: Vec<u8>,
}

impl Default for Body {
    fn default() -> Self {
        Self { chunk: Chunk::Size(0), pending: Vec::new() }
    }
}

impl Body {
    /// Feeds the bytes of one read; calls `each` with every complete event (without its
    /// blank line). Returns false once the body has ended (the zero-size chunk).
    pub fn feed(&mut self, mut bytes: &[u8], mut each: impl FnMut(&[u8])) -> bool {
        while !bytes.is_empty() {
            match self.chunk {
                // What follows the last chunk (trailers) is not the stream's.
                Chunk::Done => break,
                Chunk::Size(n) | Chunk::SizeRest(n) => {
                    let byte = bytes[0];
                    bytes = &bytes[1..];
                    self.chunk = match (self.chunk, byte) {
                        (_, b'\n') if n == 0 => Chunk::Done,
                        (_, b'\n') => Chunk::Data(n),
                        (Chunk::Size(_), b'0'..=b'9') => Chunk::Size(n * 16 + u64::from(byte - b'0')),
                        (Chunk::Size(_), b'a'..=b'f') => Chunk::Size(n * 16 + u64::from(byte - b'a' + 10)),
                        (Chunk::Size(_), b'A'..=b'F') => Chunk::Size(n * 16 + u64::from(byte - b'A' + 10)),
                        (_, b'\r') => self.chunk,
                        _ => Chunk::SizeRest(n),
                    };
                }
                Chunk::Data(left) => {
                    let take = bytes.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                    self.pending.extend_from_slice(&bytes[..take]);
                    bytes = &bytes[take..];
                    let left = left - take as u64;
                    self.chunk = if left == 0 { Chunk::DataEnd } else { Chunk::Data(left) };
                }
                Chunk::DataEnd => {
                    let byte = bytes[0];
                    bytes = &bytes[1..];
                    if byte == b'\n' {
                        self.chunk = Chunk::Size(0);
                    }
                }
            }
        }
        self.events(&mut each);
        self.chunk != Chunk::Done
    }

    fn events(&mut self, each: &mut impl FnMut(&[u8])) {
        let mut start = 0;
        for end in memmem::find_iter(&self.pending, b"\n\n") {
            each(&self.pending[start..end]);
            start = end + 2;
        }
        self.pending.drain(..start);
        if self.pending.is_empty() && self.pending.capacity() > KEEP_CAPACITY {
            self.pending = Vec::new();
        }
    }
}

/// What one frame was, for the subscriber's run accounting.
#[derive(Debug, PartialEq)]
pub enum Seen {
    /// Not a frame of the session (a heartbeat or comment), or one already counted.
    Nothing,
    /// A frame of the session, taken in order.
    Frame,
    /// A `run.accepted` frame: a run begins.
    RunAccepted,
    /// A `text_delta` of the run.
    Delta,
    /// The run's `agent_settled`.
    Settled,
}

/// A subscriber's place in its session's stream and its tally of faults, over all its
/// connections.
#[derive(Default)]
pub struct Track {
    /// The stream id and seq of the last frame taken: `Last-Event-ID` on a reconnect.
    stream: Box<[u8]>,
    seq: Option<u64>,
    /// The current connection has brought no frame yet.
    fresh: bool,
    /// The current connection was opened with a cursor.
    resumed: bool,
    /// Frames taken (each seq once).
    pub frames: u64,
    /// Of them, `session.presence` frames and snapshots in their place (after the first).
    pub presence: u64,
    pub snapshots: u64,
    pub missing: u64,
    pub repeated: u64,
    pub stream_changes: u64,
    /// Snapshots out of their place (after a cursor, or mid-stream, with a seq other than
    /// the next): the server could not replay.
    pub resyncs: u64,
    /// A connection without a cursor whose first frame was not a snapshot.
    pub bad_starts: u64,
}

impl Track {
    /// `streamId:seq` of the last frame taken, for `Last-Event-ID`; none before the
    /// first frame.
    pub fn cursor(&self) -> Option<String> {
        let seq = self.seq?;
        Some(format!("{}:{seq}", String::from_utf8_lossy(&self.stream)))
    }

    /// The last frame's seq (0 before any).
    pub fn seq(&self) -> u64 {
        self.seq.unwrap_or(0)
    }

    /// A new connection begins, with the cursor or without.
    pub fn connection(&mut self, resumed: bool) {
        self.fresh = true;
        self.resumed = resumed;
    }

    /// Faults of every kind, added up: lost, repeated or replaced frames.
    pub fn faults(&self) -> u64 {
        self.missing + self.repeated + self.stream_changes + self.resyncs + self.bad_starts
    }

    /// Takes one SSE event.
    pub fn event(&mut self, event: &[u8]) -> Seen {
        // Heartbeats and comments carry no id; they are not frames of the session.
        let Some((stream, seq, data)) = split_id(event) else { return Seen::Nothing };
        let kind = frame_type(data);
        let fresh = std::mem::replace(&mut self.fresh, false);
        let same = *stream == *self.stream;
        let next = same && self.seq.is_some_and(|prev| seq == prev + 1);
        if fresh && !self.resumed {
            // A connection without a cursor starts with a snapshot, wherever it jumps to.
            if kind != SNAPSHOT {
                self.bad_starts += 1;
            }
        } else if kind == SNAPSHOT && !next {
            // A snapshot in its place in the stream (the bus publishes one when a node
            // begins following a running session) is a frame like any other; one that
            // jumps or goes back replaced frames a replay was due.
            self.resyncs += 1;
        } else if let Some(prev) = self.seq.filter(|_| !next) {
            if !same {
                self.stream_changes += 1;
            } else if seq <= prev {
                self.repeated += 1;
                return Seen::Nothing;
            } else {
                self.missing += seq - prev - 1;
            }
        }
        if !same {
            self.stream = stream.into();
        }
        self.seq = Some(seq);
        self.frames += 1;
        if kind == PRESENCE {
            self.presence += 1;
        } else if kind == SNAPSHOT && next {
            self.snapshots += 1;
        }
        if kind == RUN_ACCEPTED {
            return Seen::RunAccepted;
        }
        if kind != LOOP_EVENT {
            return Seen::Frame;
        }
        if memmem::find(data, b"\"type\":\"text_delta\"").is_some() {
            Seen::Delta
        } else if memmem::find(data, b"\"type\":\"agent_settled\"").is_some() {
            Seen::Settled
        } else {
            Seen::Frame
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(seq: u64, kind: &str) -> String {
        format!("id: str_a:{seq}\ndata: {{\"type\":\"{kind}\"}}\n\n")
    }

    fn chunked(parts: &[&str]) -> Vec<u8> {
        let mut out = Vec::new();
        for part in parts {
            out.extend(format!("{:X};ext=1\r\n{part}\r\n", part.len()).bytes());
        }
        out.extend(b"0\r\n\r\n");
        out
    }

    /// Chunk sizes, extensions and events split anywhere, read a byte at a time and all
    /// at once, give the same events; the zero chunk ends the body.
    #[test]
    fn a_chunked_body_gives_its_events_however_it_is_read() {
        let events = [frame(1, "session.snapshot"), frame(2, "session.state"), ": comment\n\n".to_owned()];
        let joined = events.concat();
        let (a, b) = joined.split_at(20);
        let wire = chunked(&[a, b]);
        let mut whole = Vec::new();
        assert!(!Body::default().feed(&wire, |e| whole.push(e.to_vec())));
        let mut bytewise = Vec::new();
        let mut body = Body::default();
        let open: Vec<bool> =
            wire.iter().map(|b| body.feed(std::slice::from_ref(b), |e| bytewise.push(e.to_vec()))).collect();
        assert_eq!(whole, bytewise);
        assert_eq!(whole.len(), 3);
        assert_eq!(whole[1], frame(2, "session.state").trim_end().as_bytes());
        assert_eq!(open.iter().position(|o| !o), Some(wire.len() - 3), "the zero-size chunk's line ends it");
    }

    fn track(events: &[String], resumed_at: &[usize]) -> (Track, Vec<Seen>) {
        let mut track = Track::default();
        track.connection(false);
        let mut seen = Vec::new();
        for (i, e) in events.iter().enumerate() {
            if resumed_at.contains(&i) {
                track.connection(true);
            }
            seen.push(track.event(e.trim_end().as_bytes()));
        }
        (track, seen)
    }

    #[test]
    fn a_resume_that_continues_the_seqs_is_sound_and_the_cursor_follows() {
        let events = [
            frame(5, "session.snapshot"),
            frame(6, "run.accepted"),
            frame(7, "session.state"),
            frame(8, "session.state"),
        ];
        let (t, seen) = track(&events, &[2]);
        assert_eq!(t.faults(), 0);
        assert_eq!((t.frames, t.cursor().as_deref()), (4, Some("str_a:8")));
        assert_eq!(seen[1], Seen::RunAccepted);
    }

    #[test]
    fn holes_repeats_resyncs_and_bad_starts_are_each_counted() {
        let events = [
            frame(5, "session.state"), // no snapshot first
            frame(6, "session.state"),
            frame(6, "session.state"),     // repeat
            frame(9, "session.state"),     // two missing
            frame(10, "session.snapshot"), // in its place: a frame like any other
            frame(12, "session.snapshot"), // mid-stream, jumping
            frame(12, "session.snapshot"), // on a resumed connection, not the next seq
        ];
        let (t, seen) = track(&events, &[6]);
        assert_eq!((t.bad_starts, t.repeated, t.missing, t.resyncs), (1, 1, 2, 2));
        assert_eq!(seen[2], Seen::Nothing, "a repeat is not counted again");
        assert_eq!(t.frames, 6);
    }

    #[test]
    fn deltas_and_the_settle_are_told_apart() {
        let mut t = Track::default();
        t.connection(false);
        t.event(frame(1, "session.snapshot").trim_end().as_bytes());
        let delta = "id: str_a:2\ndata: {\"type\":\"loop.event\",\"event\":{\"type\":\"text_delta\",\"text\":\"w\"}}";
        let settled = "id: str_a:3\ndata: {\"type\":\"loop.event\",\"event\":{\"type\":\"agent_settled\"}}";
        assert_eq!((t.event(delta.as_bytes()), t.event(settled.as_bytes())), (Seen::Delta, Seen::Settled));
        assert_eq!(t.event(b"event: heartbeat\ndata: {}"), Seen::Nothing);
    }
}
