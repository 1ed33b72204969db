//! Server-Sent Events: the encoder every stream uses and an incremental decoder for
//! clients (tests, benchmarks, the CLI) and for the model providers' streams.
//!
//! The decoder follows the HTML event-stream rules: lines end in CR, LF or CRLF (a CR
//! at the end of one chunk and an LF at the start of the next are one line end),
//! `field: value` with one optional space after the colon, `data` lines joined with
//! LF, a blank line dispatches, lines starting with `:` are comments. Bytes are kept
//! until a whole line arrived, so a UTF-8 character split across chunks decodes
//! correctly.

use bytes::{BufMut, Bytes, BytesMut};

/// The heartbeat every stream sends: a named event with an empty object and no id.
pub const HEARTBEAT: &[u8] = b"event: heartbeat\ndata: {}\n\n";

/// Encodes one event. `data` may contain line breaks (LF, CR or CRLF); each line
/// becomes a `data:` line, so the event decodes with its line breaks as LF.
///
/// `id` and `event` are single-line fields: a line break in one would end the field
/// and let the rest of the value pose as further fields or events, so any CR or LF in
/// them is dropped. (Spool's ids and event names never contain one.)
pub fn encode(id: Option<&str>, event: Option<&str>, data: &str) -> Bytes {
    let mut out = BytesMut::with_capacity(data.len() + 64);
    if let Some(id) = id {
        put_field(&mut out, "id", id);
    }
    if let Some(event) = event {
        put_field(&mut out, "event", event);
    }
    // A lone CR ends a line for every decoder, exactly like LF and CRLF.
    for line in data.split("\r\n").flat_map(|l| l.split(['\r', '\n'])) {
        put_field(&mut out, "data", line);
    }
    out.put_u8(b'\n');
    out.freeze()
}

/// A comment line (`: text`), used as a keep-alive by some dialects. Line breaks in
/// `text` are dropped, as in [`encode`]'s single-line fields.
pub fn comment(text: &str) -> Bytes {
    let mut out = BytesMut::with_capacity(text.len() + 4);
    put_field(&mut out, "", text);
    out.put_u8(b'\n');
    out.freeze()
}

/// Writes `name: value` and a LF, leaving out any CR or LF in `value`.
fn put_field(out: &mut BytesMut, name: &str, value: &str) {
    out.put_slice(name.as_bytes());
    out.put_slice(b": ");
    for part in value.split(['\r', '\n']) {
        out.put_slice(part.as_bytes());
    }
    out.put_u8(b'\n');
}

/// One decoded event.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// The `id` field of this event, if it had one.
    pub id: Option<String>,
    /// The `event` field; `None` means the default `message` type.
    pub event: Option<String>,
    pub data: String,
}

/// Incremental decoder: feed chunks, get whole events.
///
/// A leading byte-order mark is skipped, as the SSE rules say. One event (its current
/// line plus the data gathered so far) may hold at most [`Decoder::DEFAULT_MAX_EVENT`]
/// bytes, or the limit given to [`Decoder::with_max_event`]: a peer that never ends a
/// line or an event must not grow this process's memory without bound. An event over
/// the limit is dropped whole (never delivered cut short) and counted in
/// [`Decoder::discarded`]; decoding resumes after its blank line.
#[derive(Debug)]
pub struct Decoder {
    line: Vec<u8>,
    last_was_cr: bool,
    id: Option<String>,
    event: Option<String>,
    data: String,
    has_data: bool,
    /// Still at the start of the stream, where a byte-order mark may be.
    at_start: bool,
    max_event: usize,
    /// Dropping an oversized event until its blank line.
    skipping: Option<Skip>,
    discarded: u64,
}

#[derive(Debug, Clone, Copy)]
struct Skip {
    /// The oversized line has ended (later lines are still the same event).
    line_ended: bool,
    /// The current skipped line has bytes (so a line end does not end the event).
    line_has_bytes: bool,
}

const BOM: &[u8] = b"\xEF\xBB\xBF";

impl Default for Decoder {
    fn default() -> Self {
        Self::with_max_event(Self::DEFAULT_MAX_EVENT)
    }
}

impl Decoder {
    /// Room for the largest frame Spool sends (a snapshot of a long session) and any
    /// provider's event, with margin.
    pub const DEFAULT_MAX_EVENT: usize = 64 << 20;

    pub fn new() -> Self {
        Self::default()
    }

    /// A decoder that drops events larger than `max_event` bytes.
    pub fn with_max_event(max_event: usize) -> Self {
        Self {
            line: Vec::new(),
            last_was_cr: false,
            id: None,
            event: None,
            data: String::new(),
            has_data: false,
            at_start: true,
            max_event,
            skipping: None,
            discarded: 0,
        }
    }

    /// How many events were dropped for being over the size limit.
    pub fn discarded(&self) -> u64 {
        self.discarded
    }

    /// Feeds a chunk and returns the events it completed.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        let mut out = Vec::new();
        for &b in chunk {
            match b {
                b'\n' if self.last_was_cr => self.last_was_cr = false,
                b'\n' | b'\r' => {
                    self.last_was_cr = b == b'\r';
                    self.at_start = false;
                    if let Some(skip) = &mut self.skipping {
                        if skip.line_ended && !skip.line_has_bytes {
                            self.skipping = None;
                        } else {
                            *skip = Skip { line_ended: true, line_has_bytes: false };
                        }
                        continue;
                    }
                    let line = std::mem::take(&mut self.line);
                    if let Some(ev) = self.line_done(&line) {
                        out.push(ev);
                    }
                }
                _ => {
                    self.last_was_cr = false;
                    if let Some(skip) = &mut self.skipping {
                        skip.line_has_bytes = true;
                        continue;
                    }
                    self.line.push(b);
                    if self.at_start {
                        if self.line == BOM {
                            self.line.clear();
                            self.at_start = false;
                        } else if !BOM.starts_with(&self.line) {
                            self.at_start = false;
                        }
                    }
                    if self.line.len() + self.data.len() > self.max_event {
                        self.drop_event();
                    }
                }
            }
        }
        out
    }

    /// Forgets the event being read; the rest of it is skipped up to its blank line.
    fn drop_event(&mut self) {
        self.line = Vec::new();
        self.data = String::new();
        self.has_data = false;
        self.id = None;
        self.event = None;
        self.discarded += 1;
        self.skipping = Some(Skip { line_ended: false, line_has_bytes: true });
    }

    fn line_done(&mut self, line: &[u8]) -> Option<SseEvent> {
        if line.is_empty() {
            if !self.has_data {
                self.event = None;
                self.id = None;
                return None;
            }
            self.has_data = false;
            return Some(SseEvent {
                id: self.id.take(),
                event: self.event.take(),
                data: std::mem::take(&mut self.data),
            });
        }
        let line = String::from_utf8_lossy(line);
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (&*line, ""),
        };
        match field {
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "event" => self.event = Some(value.to_owned()),
            "id" if !value.contains('\0') => self.id = Some(value.to_owned()),
            _ => {}
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn decode_all(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut d = Decoder::new();
        chunks.iter().flat_map(|c| d.push(c)).collect()
    }

    #[test]
    fn encodes_id_event_and_multiline_data() {
        assert_eq!(&encode(Some("s:1"), Some("x"), "a\nb")[..], b"id: s:1\nevent: x\ndata: a\ndata: b\n\n");
    }

    #[test]
    fn decodes_heartbeat_comments_and_line_ends() {
        let evs = decode_all(&[b": hi\r\n", HEARTBEAT, b"id: 1\rdata:x\r\n\r\n"]);
        assert_eq!(evs.len(), 2);
        assert_eq!(evs[0].event.as_deref(), Some("heartbeat"));
        assert_eq!(evs[0].data, "{}");
        assert_eq!(evs[1].id.as_deref(), Some("1"));
        assert_eq!(evs[1].data, "x");
    }

    /// Regression: a CR inside `data` went out raw, so the decoder (like a browser)
    /// ended the line there: "a\rb" decoded as "a", and "x\r\rdata: y" as two events.
    #[test]
    fn a_cr_in_data_is_a_line_break_not_an_injection() {
        assert_eq!(&encode(None, None, "a\rb")[..], b"data: a\ndata: b\n\n");
        let evs = decode_all(&[&encode(None, None, "x\r\rdata: y\r\nz")]);
        assert_eq!(evs, vec![SseEvent { id: None, event: None, data: "x\n\ndata: y\nz".into() }]);
    }

    #[test]
    fn a_leading_byte_order_mark_is_skipped_even_split_across_chunks() {
        assert_eq!(decode_all(&[b"\xEF\xBBdata: a\n\n"]).len(), 0, "a broken mark is not a mark");
        let evs = decode_all(&[b"\xEF", b"\xBB", b"\xBFdata: a\n\n"]);
        assert_eq!(evs, vec![SseEvent { id: None, event: None, data: "a".into() }]);
        let later = decode_all(&[b"data: a\n\n\xEF\xBB\xBFdata: b\n\n"]);
        assert_eq!(later.len(), 1, "only at the very start: {later:?}");
    }

    #[test]
    fn an_event_over_the_limit_is_dropped_whole_and_decoding_goes_on() {
        let mut d = Decoder::with_max_event(16);
        let mut evs = d.push(b"data: short\n\nid: 7\ndata: this line is far too long for it\r\ndata: tail\n\n");
        evs.extend(d.push(b"data: 0123456789\ndata: 0123456789\n\n"));
        evs.extend(d.push(b"data: after\n\n"));
        let data: Vec<&str> = evs.iter().map(|e| e.data.as_str()).collect();
        assert_eq!(data, ["short", "after"], "the long line's event and the one over the limit in total are dropped");
        assert_eq!(evs[1].id, None, "nothing of a dropped event leaks into the next");
        assert_eq!(d.discarded(), 2);
        // A peer that never ends a line holds at most the limit.
        let mut d = Decoder::with_max_event(1024);
        for _ in 0..1000 {
            assert!(d.push(&[b'x'; 1000]).is_empty());
        }
        assert!(d.line.len() <= 1024 && d.discarded() == 1);
    }

    #[test]
    fn line_breaks_in_single_line_fields_are_dropped() {
        let bytes = encode(Some("1\n\nid: 2"), Some("x\rdata: evil"), "ok");
        assert_eq!(&bytes[..], b"id: 1id: 2\nevent: xdata: evil\ndata: ok\n\n");
        assert_eq!(&comment("a\n\nb")[..], b": ab\n\n");
        assert_eq!(decode_all(&[&bytes]).len(), 1);
    }

    proptest! {
        #[test]
        fn never_panics_on_garbage(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = Decoder::new().push(&bytes);
        }
    }
}
