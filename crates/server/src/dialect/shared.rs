//! Encode once per output form: the mapping of a session's frames into one dialect, shared
//! by every subscriber that wants the same form (centrifuge's "encoded payloads are
//! shared by all subscribers with the same protocol").
//!
//! # Why
//!
//! A dialect's mapping is stateful (OpenCode's part offsets, the hub's run tally) but the
//! state is a function of the session's frames, not of the connection: two connections
//! that have mapped the same frames hold equal mapper states and produce the same
//! events. So a session keeps, per output form, one mapper and the encoded outputs of
//! the latest frames; a thousand subscribers then cost one mapping and one
//! serialization per frame, plus a copy of the bytes each.
//!
//! # How a subscriber uses it ([`Follow`])
//!
//! A subscriber starts with a mapper of its own (it may start from a snapshot or replay
//! frames older than anyone else needs). For frame `seq`:
//!
//! * the form already holds `seq`'s output: take it (and drop the own mapper — from here
//!   on the subscriber only takes shared outputs);
//! * `seq` is the next frame the form maps: the form maps it, for everyone;
//! * the form is behind `seq` because other subscribers lag: the subscriber maps `seq`
//!   itself, leaving the outputs they need; when they catch up it joins them;
//! * there is no form yet, or nobody has fed it for a whole window: the form adopts this
//!   subscriber's mapper, which is exactly at `seq - 1`, and maps from there;
//! * `seq` is older than the form holds: the subscriber maps it itself.
//!
//! Outputs are kept for the last [`KEEP`] frames. A subscriber that has dropped its own
//! mapper and then falls further behind than that is told to end (like a slow client):
//! it reconnects and starts over. That window is larger than the engine's slow-client
//! limit in practice, which cuts such a subscriber first.
//!
//! Snapshot frames are never shared: what a snapshot turns into depends on what the
//! connection is told about the session (announced, joined), so the subscriber maps it
//! with a mapper of its own again, which also re-anchors it.
//!
//! A form's key names the session's stream too: seqs belong to a stream, and a stream
//! that restarts (bus reset, a reload) begins a new form.
//!
//! Users: the WebSocket hub (one form per session), OpenCode's `/event` (per session and
//! delta style) and the run stream (per run: subscribers re-attaching with different
//! `after`s start at different frames, replaying older ones with their own fold until
//! they reach the outputs the form holds).

use spool_protocol::api::PromptPart;
use spool_protocol::frame::{Frame, FrameBody};
use spool_protocol::{SessionId, StreamId};
use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Mutex, Weak};

/// Outputs kept per form: a subscriber sharing a form may lag this many frames.
pub const KEEP: usize = 4096;

/// A dialect's per-session mapping, as a value that can be cloned at any frame.
pub trait FormMapper: Clone + Send + 'static {
    /// The encoded output of one frame (shared by reference between subscribers).
    type Out: Send + Sync + 'static;
    fn map(&mut self, frame: &Frame) -> Self::Out;
}

/// Every live form of one dialect, keyed by session, stream and the dialect's own
/// distinctions (e.g. OpenCode's delta style). A form lives as long as a subscriber
/// holds it.
pub struct Forms<K, M: FormMapper> {
    live: Mutex<HashMap<FormId<K>, Weak<Form<M>>>>,
}

/// A form's identity: the session, its stream, and the dialect's distinctions.
type FormId<K> = (SessionId, StreamId, K);

impl<K: Hash + Eq + Clone, M: FormMapper> Default for Forms<K, M> {
    fn default() -> Self {
        Self { live: Mutex::new(HashMap::new()) }
    }
}

impl<K: Hash + Eq + Clone, M: FormMapper> Forms<K, M> {
    /// The form of `key` on this stream, made if nobody holds it.
    fn form(&self, session: &SessionId, stream: &StreamId, key: &K) -> Arc<Form<M>> {
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        let id = (session.clone(), stream.clone(), key.clone());
        if let Some(form) = live.get(&id).and_then(Weak::upgrade) {
            return form;
        }
        // Forms nobody holds any more go when a new one is made: the map stays as large
        // as the live forms, without a sweeper.
        live.retain(|_, form| form.strong_count() > 0);
        let form = Arc::new(Form { state: Mutex::new(None) });
        live.insert(id, Arc::downgrade(&form));
        form
    }

    /// Number of forms alive (for tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.live.lock().unwrap_or_else(|p| p.into_inner()).values().filter(|f| f.strong_count() > 0).count()
    }
}

struct Form<M: FormMapper> {
    /// A std mutex: mapping one frame is short and nothing awaits under it.
    state: Mutex<Option<FormState<M>>>,
}

struct FormState<M: FormMapper> {
    mapper: M,
    /// Seq of the next frame the mapper maps.
    next: u64,
    /// `(seq, output)` of the latest frames, oldest first, ending at `next - 1`.
    outputs: VecDeque<(u64, Arc<M::Out>)>,
}

/// Why a subscriber must stop: it fell behind the shared outputs with no mapper of its
/// own to go on with.
#[derive(Debug, PartialEq, Eq)]
pub struct Behind;

/// One subscriber's place in a form: see the module docs.
pub struct Follow<K, M: FormMapper> {
    key: K,
    own: Option<M>,
    form: Option<Arc<Form<M>>>,
}

impl<K: Hash + Eq + Clone, M: FormMapper> Follow<K, M> {
    /// A subscriber whose own mapper is `own` (at the frame before the next it maps).
    pub fn new(key: K, own: M) -> Self {
        Self { key, own: Some(own), form: None }
    }

    /// Replaces the own mapper (after a snapshot re-anchored the subscriber).
    pub fn reanchor(&mut self, own: M) {
        self.own = Some(own);
        self.form = None;
    }

    /// Reads the mapper this subscriber is at: its own, or the form's (which is at the
    /// last frame anyone took, never behind this subscriber).
    pub fn peek<R>(&self, f: impl FnOnce(Option<&M>) -> R) -> R {
        if let Some(own) = &self.own {
            return f(Some(own));
        }
        let Some(form) = &self.form else { return f(None) };
        let state = form.state.lock().unwrap_or_else(|p| p.into_inner());
        f(state.as_ref().map(|s| &s.mapper))
    }

    /// A mapper at exactly `at` (the seq of the last frame this subscriber took), to go
    /// on alone with: its own, or a clone of the form's if the form is at that very
    /// frame. `None` when neither is (others moved the form on). With `at: None`, any
    /// mapper will do (a snapshot is about to reset it).
    pub fn take_mapper(&mut self, at: Option<u64>) -> Option<M> {
        if let Some(own) = self.own.take() {
            return Some(own);
        }
        let form = self.form.as_ref()?;
        let state = form.state.lock().unwrap_or_else(|p| p.into_inner());
        let s = state.as_ref()?;
        (at.is_none() || at == s.next.checked_sub(1)).then(|| s.mapper.clone())
    }

    /// The output of `frame` for this subscriber: shared when the form has it.
    pub fn map(&mut self, forms: &Forms<K, M>, frame: &Frame) -> Result<Arc<M::Out>, Behind> {
        if matches!(frame.body, FrameBody::Snapshot { .. }) {
            // Per connection (module docs), and it re-anchors the subscriber: from here on
            // its own mapper is the one that saw the snapshot.
            let mut own = self.take_mapper(None).ok_or(Behind)?;
            let out = Arc::new(own.map(frame));
            self.reanchor(own);
            return Ok(out);
        }
        let form = match &self.form {
            Some(form) => form.clone(),
            None => {
                let form = forms.form(&frame.session_id, &frame.stream_id, &self.key);
                self.form = Some(form.clone());
                form
            }
        };
        let mut state = form.state.lock().unwrap_or_else(|p| p.into_inner());
        let seq = frame.seq;
        match &mut *state {
            Some(s) if seq < s.next => {
                let front = s.outputs.front().map_or(s.next, |(first, _)| *first);
                if seq >= front {
                    let out = s.outputs[(seq - front) as usize].1.clone();
                    self.own = None;
                    return Ok(out);
                }
                drop(state);
                // Older than the form holds: this subscriber maps it itself.
                let own = self.own.as_mut().ok_or(Behind)?;
                Ok(Arc::new(own.map(frame)))
            }
            Some(s) if seq == s.next => {
                let out = Arc::new(s.mapper.map(frame));
                s.push(seq, out.clone());
                self.own = None;
                Ok(out)
            }
            // Ahead of a form others still feed (they lag): go on alone for now, so the
            // outputs they need stay; they catch up and the form reaches this seq.
            Some(s) if seq - s.next <= KEEP as u64 && self.own.is_some() => {
                drop(state);
                let own = self.own.as_mut().expect("checked above");
                Ok(Arc::new(own.map(frame)))
            }
            // No form yet, or one nobody has fed for a whole window: the form adopts this
            // subscriber's mapper, which is exactly at `seq - 1`.
            _ => {
                let mut mapper = self.own.take().ok_or(Behind)?;
                let out = Arc::new(mapper.map(frame));
                let mut s = FormState { mapper, next: seq, outputs: VecDeque::new() };
                s.push(seq, out.clone());
                *state = Some(s);
                Ok(out)
            }
        }
    }
}

impl<M: FormMapper> FormState<M> {
    fn push(&mut self, seq: u64, out: Arc<M::Out>) {
        self.outputs.push_back((seq, out));
        self.next = seq + 1;
        if self.outputs.len() > KEEP {
            self.outputs.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dialect::test_frames::{frame, run_id};

    /// A mapper whose output depends on everything it mapped: the running count of
    /// frames and their seqs, so a shared output from the wrong state shows.
    #[derive(Clone, Default)]
    struct Tally {
        seen: u64,
        maps: Arc<std::sync::atomic::AtomicU64>,
    }

    impl FormMapper for Tally {
        type Out = String;
        fn map(&mut self, frame: &Frame) -> String {
            self.maps.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.seen += 1;
            format!("{}@{}", self.seen, frame.seq)
        }
    }

    fn delta(seq: u64) -> Frame {
        frame(seq, FrameBody::RunAccepted { request_id: format!("r{seq}"), run_id: run_id() })
    }

    #[test]
    fn subscribers_at_the_same_place_map_each_frame_once_and_get_equal_outputs() {
        let forms = Forms::<(), Tally>::default();
        let maps = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let mine = Tally { seen: 0, maps: maps.clone() };
        let mut subs: Vec<_> = (0..100).map(|_| Follow::new((), mine.clone())).collect();
        for seq in 1..=50 {
            let outs: Vec<_> = subs.iter_mut().map(|s| s.map(&forms, &delta(seq)).expect("shared")).collect();
            assert!(outs.iter().all(|o| **o == format!("{seq}@{seq}")));
            assert!(outs.windows(2).all(|w| Arc::ptr_eq(&w[0], &w[1])), "one output, shared");
        }
        assert_eq!(maps.load(std::sync::atomic::Ordering::Relaxed), 50, "one mapping per frame");
        assert_eq!(forms.len(), 1);
        drop(subs);
        assert_eq!(forms.len(), 0, "a form goes with its last subscriber");
    }

    #[test]
    fn a_late_subscriber_maps_older_frames_itself_then_joins_the_shared_outputs() {
        let forms = Forms::<(), Tally>::default();
        let mut early = Follow::new((), Tally::default());
        for seq in 1..=10 {
            early.map(&forms, &delta(seq)).expect("mapped");
        }
        // A subscriber replaying from seq 1 with a mapper that starts empty: equal
        // history, so equal outputs, whoever maps.
        let mut late = Follow::new((), Tally::default());
        for seq in 1..=10 {
            assert_eq!(*late.map(&forms, &delta(seq)).expect("mapped"), format!("{seq}@{seq}"));
        }
        assert!(late.own.is_none(), "it went over to the shared outputs");
        assert_eq!(*early.map(&forms, &delta(11)).expect("mapped"), "11@11");
        assert_eq!(*late.map(&forms, &delta(11)).expect("mapped"), "11@11");
    }

    #[test]
    fn a_subscriber_ahead_of_a_lagging_form_goes_alone_until_the_others_catch_up() {
        let forms = Forms::<(), Tally>::default();
        let mut a = Follow::new((), Tally::default());
        a.map(&forms, &delta(1)).expect("mapped");
        // `b` joined from a snapshot at 4 (its mapper has seen 4 frames' worth) while `a`
        // still reads 2: `b` maps 5 and 6 itself, `a` keeps its outputs.
        let mut b = Follow::new((), Tally { seen: 4, ..Tally::default() });
        assert_eq!(*b.map(&forms, &delta(5)).expect("own"), "5@5");
        assert!(b.own.is_some());
        for seq in 2..=6 {
            assert_eq!(*a.map(&forms, &delta(seq)).expect("shared"), format!("{seq}@{seq}"));
        }
        assert_eq!(*b.map(&forms, &delta(6)).expect("shared"), "6@6");
        assert!(b.own.is_none(), "b went over to the shared outputs");
    }

    #[test]
    fn a_form_nobody_fed_for_a_window_adopts_the_mapper_of_whoever_is_ahead() {
        let forms = Forms::<(), Tally>::default();
        let mut a = Follow::new((), Tally::default());
        a.map(&forms, &delta(1)).expect("mapped");
        let far = KEEP as u64 + 5;
        let mut b = Follow::new((), Tally { seen: far - 1, ..Tally::default() });
        assert_eq!(*b.map(&forms, &delta(far)).expect("adopted"), format!("{far}@{far}"));
        assert!(b.own.is_none());
        // `a` has no mapper of its own left and its outputs are gone: it is behind.
        assert_eq!(a.map(&forms, &delta(2)).err(), Some(Behind));
    }

    #[test]
    fn a_subscriber_that_falls_out_of_the_window_is_behind() {
        let forms = Forms::<(), Tally>::default();
        let mut fast = Follow::new((), Tally::default());
        let mut slow = Follow::new((), Tally::default());
        slow.map(&forms, &delta(1)).expect("mapped");
        fast.map(&forms, &delta(1)).expect("mapped");
        for seq in 2..=(KEEP as u64 + 10) {
            fast.map(&forms, &delta(seq)).expect("mapped");
        }
        assert_eq!(slow.map(&forms, &delta(2)).err(), Some(Behind));
    }
}

/// Which shared form a run-following stream (AI SDK, AG-UI) follows: how its fold
/// started. Streams that started alike map alike, so they share one form.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RunForm {
    /// From the run's `run.accepted`.
    Run(spool_protocol::RunId),
    /// From the frame after this approval's request.
    After(spool_protocol::ApprovalId),
    /// From the run's start, sending nothing up to this approval's request.
    Muted(spool_protocol::ApprovalId),
    /// A fold of one stream's own (drawn from a snapshot): never shared.
    Alone(u64),
}

/// A [`RunForm::Alone`] key no other stream shares.
pub fn alone() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// The digest a client tool's result is known by in idempotency keys (16 hex digits of
/// the SHA-256 of the result as JSON): the same result sent again is a repeat, another
/// one a second answer. Every route that takes such a result keys it this way.
pub(crate) fn output_digest(output: &spool_protocol::approval::ClientOutput) -> String {
    use sha2::{Digest, Sha256};
    let json = serde_json::to_vec(output).expect("plain data serializes");
    Sha256::digest(&json).iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// A file a dialect's message carries, as the native prompt's `file` part: `url` is a
/// `data:` URL or one of Spool's own attachment URLs (any other is refused when the
/// files are read, as a native prompt's is), `media_type` the sender's claim (the bytes
/// are sniffed all the same), `filename` the name to keep with an inline file.
pub(crate) fn file_part(url: String, media_type: Option<String>, filename: Option<String>) -> PromptPart {
    PromptPart::File { id: None, url: Some(url), name: filename, media_type }
}

/// A base64 payload and its media type as a `data:` URL, for a dialect that sends the
/// two apart (AG-UI's `source {type: "data"}`, its legacy `binary` part's `data`).
pub(crate) fn data_url(media_type: &str, base64: &str) -> String {
    format!("data:{media_type};base64,{base64}")
}

/// The attachments of a dialect's file parts, read exactly as a native prompt's `parts`
/// are (`crate::http::attachments::prompt_files`): an inline file stored for `user`,
/// Spool's own URL naming its attachment, and the same refusals (limits, URLs Spool does
/// not fetch). Whether the session's model can read them is the engine's check, on submit.
pub(crate) async fn prompt_files(
    engine: &spool_engine::Engine,
    user: &spool_protocol::UserId,
    files: Vec<PromptPart>,
) -> Result<Vec<spool_protocol::AttachmentId>, crate::error::ApiError> {
    Ok(crate::http::attachments::prompt_files(engine, user, String::new(), files).await?.1)
}
