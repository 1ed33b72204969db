//! Property tests for the SSE codec: a client may receive a stream cut anywhere by the
//! network, with any of the three line ends, and must see exactly the events the server
//! sent. Streams are built from arbitrary events (ids, event names, multi-line data
//! with non-ASCII text), comments and heartbeats.

use proptest::prelude::*;
use proptest::sample::Index;
use spool_protocol::sse::{self, Decoder, HEARTBEAT, SseEvent};

/// One thing a server writes on a stream.
#[derive(Clone, Debug)]
enum Item {
    Event(SseEvent),
    Comment(String),
    Heartbeat,
}

impl Item {
    fn bytes(&self) -> Vec<u8> {
        match self {
            Item::Event(e) => sse::encode(e.id.as_deref(), e.event.as_deref(), &e.data).to_vec(),
            Item::Comment(text) => sse::comment(text).to_vec(),
            Item::Heartbeat => HEARTBEAT.to_vec(),
        }
    }

    /// The event a client sees for this item, if any.
    fn seen(&self) -> Option<SseEvent> {
        match self {
            Item::Event(e) => Some(e.clone()),
            Item::Comment(_) => None,
            Item::Heartbeat => Some(SseEvent { id: None, event: Some("heartbeat".into()), data: "{}".into() }),
        }
    }
}

/// Text for one line: any characters but line ends (a NUL would make an id void).
const LINE: &str = "[^\r\n\u{0}]{0,12}";

fn event() -> impl Strategy<Value = SseEvent> {
    let data = prop::collection::vec(LINE, 1..4).prop_map(|lines| lines.join("\n"));
    (prop::option::of(LINE), prop::option::of(LINE), data).prop_map(|(id, event, data)| SseEvent { id, event, data })
}

fn item() -> impl Strategy<Value = Item> {
    prop_oneof![
        4 => event().prop_map(Item::Event),
        1 => LINE.prop_map(Item::Comment),
        1 => Just(Item::Heartbeat),
    ]
}

/// A stream (with LF line ends) and the events it carries.
fn stream() -> impl Strategy<Value = (Vec<u8>, Vec<SseEvent>)> {
    prop::collection::vec(item(), 0..6)
        .prop_map(|items| (items.iter().flat_map(Item::bytes).collect(), items.iter().filter_map(Item::seen).collect()))
}

/// The same stream with every line end written as `end`. Only line ends are LF bytes in
/// an encoded stream (no field value contains one), so this rewrites nothing else.
fn with_line_ends(lf_stream: &[u8], end: &[u8]) -> Vec<u8> {
    lf_stream.iter().flat_map(|b| if *b == b'\n' { end } else { std::slice::from_ref(b) }).copied().collect()
}

/// `bytes` cut at `cuts` (any positions, any order, repeats allowed).
fn split<'a>(bytes: &'a [u8], cuts: &[Index]) -> Vec<&'a [u8]> {
    let mut points: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
    points.sort_unstable();
    let mut chunks = Vec::new();
    let mut start = 0;
    for p in points {
        chunks.push(&bytes[start..p]);
        start = p;
    }
    chunks.push(&bytes[start..]);
    chunks
}

fn decode(chunks: &[&[u8]]) -> Vec<SseEvent> {
    let mut decoder = Decoder::new();
    chunks.iter().flat_map(|c| decoder.push(c)).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_split_decodes_to_the_events_sent(
        (bytes, expected) in stream(),
        cuts in prop::collection::vec(any::<Index>(), 0..12),
    ) {
        prop_assert_eq!(decode(&split(&bytes, &cuts)), expected);
    }

    #[test]
    fn cr_lf_and_crlf_line_ends_decode_the_same(
        (bytes, expected) in stream(),
        cuts in prop::collection::vec(any::<Index>(), 0..12),
    ) {
        for end in [&b"\n"[..], b"\r", b"\r\n"] {
            let text = with_line_ends(&bytes, end);
            prop_assert_eq!(&decode(&split(&text, &cuts)), &expected, "line end {:?}", end);
        }
    }

    /// Every cut that falls inside a multi-byte character, one at a time and all at once.
    #[test]
    fn utf8_split_across_chunks_decodes_intact(data in "[a-zé€😀\u{10ffff}]{1,8}( [é€😀]{1,4}){0,3}") {
        let bytes = sse::encode(Some("stm_1:7"), Some("delta"), &data);
        let expected = vec![SseEvent { id: Some("stm_1:7".into()), event: Some("delta".into()), data: data.clone() }];
        let text = std::str::from_utf8(&bytes).expect("the encoder writes UTF-8");
        let inside: Vec<usize> = (1..bytes.len()).filter(|&i| !text.is_char_boundary(i)).collect();
        for &i in &inside {
            prop_assert_eq!(&decode(&[&bytes[..i], &bytes[i..]]), &expected, "cut at byte {}", i);
        }
        let mut points = vec![0];
        points.extend(&inside);
        points.push(bytes.len());
        let chunks: Vec<&[u8]> = points.windows(2).map(|w| &bytes[w[0]..w[1]]).collect();
        prop_assert_eq!(decode(&chunks), expected);
    }

    /// Data with any line ends (a lone CR included) arrives with its line ends as LF, and
    /// nothing in it can start another field or event. (A CR before a LF is one CRLF.)
    #[test]
    fn data_with_any_line_ends_decodes_as_its_lines(
        lines in prop::collection::vec(LINE, 1..5),
        ends in prop::collection::vec(prop_oneof![Just("\n"), Just("\r"), Just("\r\n")], 4),
    ) {
        let mut data = lines[0].clone();
        for (line, end) in lines[1..].iter().zip(&ends) {
            data.push_str(end);
            data.push_str(line);
        }
        let decoded = decode(&[&sse::encode(None, None, &data)]);
        let expected = data.replace("\r\n", "\n").replace('\r', "\n");
        prop_assert_eq!(decoded, vec![SseEvent { id: None, event: None, data: expected }]);
    }

    #[test]
    fn never_panics_and_split_does_not_matter_for_any_bytes(
        bytes in prop::collection::vec(any::<u8>(), 0..512),
        cuts in prop::collection::vec(any::<Index>(), 0..12),
    ) {
        prop_assert_eq!(decode(&split(&bytes, &cuts)), decode(&[&bytes]));
    }
}
