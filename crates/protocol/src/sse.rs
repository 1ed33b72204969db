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

    /// Regression: a CR inside `data` went out raw, so the decoder (like a browser)
    /// ended the line there: "a\rb" decoded as "a", and "x\r\rdata: y" as two events.
    #[test]
    fn a_cr_in_data_is_a_line_break_not_an_injection() {
        assert_eq!(&encode(None, None, "a\rb")[..], b"data: a\ndata: b\n\n");
        let evs = decode_all(&[&encode(None, None, "x\r\rdata: y\r\nz")]);
        assert_eq!(evs, vec![SseEvent { id: None, event: None, data: "x\n\ndata: y\nz".into() }]);
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
