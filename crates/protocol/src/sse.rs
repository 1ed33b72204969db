//! Server-Sent Events: the encoder every stream uses and an incremental decoder for
//! clients (tests, benchmarks, the CLI).
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

/// Encodes one event. `data` may contain newlines; each line becomes a `data:` line.
pub fn encode(id: Option<&str>, event: Option<&str>, data: &str) -> Bytes {
    let mut out = BytesMut::with_capacity(data.len() + 64);
    if let Some(id) = id {
        out.put_slice(b"id: ");
        out.put_slice(id.as_bytes());
        out.put_u8(b'\n');
    }
    if let Some(event) = event {
        out.put_slice(b"event: ");
        out.put_slice(event.as_bytes());
        out.put_u8(b'\n');
    }
    for line in data.split('\n') {
        out.put_slice(b"data: ");
        out.put_slice(line.as_bytes());
        out.put_u8(b'\n');
    }
    out.put_u8(b'\n');
    out.freeze()
}

/// A comment line (`: text`), used as a keep-alive by some dialects.
pub fn comment(text: &str) -> Bytes {
    Bytes::from(format!(": {text}\n\n"))
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
#[derive(Debug, Default)]
pub struct Decoder {
    line: Vec<u8>,
    last_was_cr: bool,
    id: Option<String>,
    event: Option<String>,
    data: String,
    has_data: bool,
}

impl Decoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds a chunk and returns the events it completed.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        let mut out = Vec::new();
        for &b in chunk {
            match b {
                b'\n' if self.last_was_cr => self.last_was_cr = false,
                b'\n' | b'\r' => {
                    self.last_was_cr = b == b'\r';
                    let line = std::mem::take(&mut self.line);
                    if let Some(ev) = self.line_done(&line) {
                        out.push(ev);
                    }
                }
                _ => {
                    self.last_was_cr = false;
                    self.line.push(b);
                }
            }
        }
        out
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

    fn stream_with(sep: &str) -> (String, Vec<SseEvent>) {
        let text =
            format!("id: a:1{sep}data: héllo 🌍{sep}data: two{sep}{sep}event: heartbeat{sep}data: {{}}{sep}{sep}");
        let expected = vec![
            SseEvent { id: Some("a:1".into()), event: None, data: "héllo 🌍\ntwo".into() },
            SseEvent { id: None, event: Some("heartbeat".into()), data: "{}".into() },
        ];
        (text, expected)
    }

    proptest! {
        #[test]
        fn any_split_decodes_the_same(cuts in proptest::collection::vec(0usize..64, 0..8), sep_i in 0usize..3) {
            let (text, expected) = stream_with(["\n", "\r", "\r\n"][sep_i]);
            let bytes = text.as_bytes();
            let mut points: Vec<usize> = cuts.into_iter().map(|c| c.min(bytes.len())).collect();
            points.sort();
            let mut chunks = Vec::new();
            let mut prev = 0;
            for p in points { chunks.push(&bytes[prev..p]); prev = p; }
            chunks.push(&bytes[prev..]);
            prop_assert_eq!(decode_all(&chunks), expected);
        }

        #[test]
        fn never_panics_on_garbage(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = Decoder::new().push(&bytes);
        }
    }
}
