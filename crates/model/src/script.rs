//! What the scripted model says: a pure function from a request to the sequence of
//! `ModelEvent`s, with no timing. Keeping the script apart from the pacing in
//! `scripted.rs` lets tests check every directive synchronously, and lets the zero-delay
//! path hand the sequence straight to `stream::iter`.
//!
//! The events are produced lazily: `stream: 1000000` must not allocate a million
//! strings before the first one is sent, only as the consumer pulls them.

use spool_engine::ModelEvent;
use spool_engine::ModelRequest;
use spool_protocol::{Content, Message, StopReason, Usage};

/// The largest `stream: N` honoured; beyond it the prompt is answered like any other.
pub(crate) const MAX_STREAM_DELTAS: u32 = 1_000_000;
/// How much of an unrecognised prompt is quoted back.
const PROMPT_QUOTE_CHARS: usize = 200;
/// How much of a tool result's first line the summary quotes.
const RESULT_LINE_CHARS: usize = 120;

/// The events of one answer, in order.
pub(crate) type Events = Box<dyn Iterator<Item = ModelEvent> + Send>;

/// A user prompt's directive, as parsed from its trimmed text. `Think` is
/// `think: THOUGHT | ANSWER`: reasoning, then the answer (none without a `|`).
#[derive(Debug, PartialEq)]
enum Directive<'a> {
    Echo(&'a str),
    Stream(u32),
    Think {
        thought: &'a str,
        answer: &'a str,
    },
    Tool {
        name: &'a str,
        args: &'a str,
    },
    /// Several lines each starting with `tool:`: one answer calling each in turn.
    Tools(Vec<(&'a str, &'a str)>),
    Other(&'a str),
}

fn directive(prompt: &str) -> Directive<'_> {
    if let Some(text) = prompt.strip_prefix("echo:") {
        return Directive::Echo(text.trim_start());
    }
    if let Some(count) = prompt.strip_prefix("stream:") {
        let count = count.trim();
        // `u32::from_str` would accept a leading `+`; the directive is digits only.
        let digits_only = count.bytes().all(|b| b.is_ascii_digit());
        return match count.parse::<u32>() {
            Ok(n) if digits_only && n <= MAX_STREAM_DELTAS => Directive::Stream(n),
            _ => Directive::Other(prompt),
        };
    }
    if let Some(rest) = prompt.strip_prefix("think:") {
        let (thought, answer) = rest.split_once('|').unwrap_or((rest, ""));
        return Directive::Think { thought: thought.trim(), answer: answer.trim() };
    }
    if prompt.starts_with("tool:") {
        let calls: Option<Vec<_>> = tool_segments(prompt).into_iter().map(tool_call_of).collect();
        return match calls {
            Some(calls) if calls.len() > 1 => Directive::Tools(calls),
            // One call, or several of which one has no name: the prompt as a single call,
            // its args running to the end (JSON spanning lines stays one call's args).
            _ => match tool_call_of(prompt) {
                Some((name, args)) => Directive::Tool { name, args },
                None => Directive::Other(prompt),
            },
        };
    }
    Directive::Other(prompt)
}

/// `prompt` cut before every line that starts with `tool:` (each piece starts with it;
/// a call's args may span lines up to the next such line).
fn tool_segments(prompt: &str) -> Vec<&str> {
    let mut starts: Vec<usize> = vec![0];
    let mut offset = 0;
    for line in prompt.split_inclusive('\n') {
        if offset > 0 && line.trim_start().starts_with("tool:") {
            starts.push(offset + (line.len() - line.trim_start().len()));
        }
        offset += line.len();
    }
    starts
        .iter()
        .enumerate()
        .map(|(i, &start)| prompt[start..starts.get(i + 1).copied().unwrap_or(prompt.len())].trim())
        .collect()
}

/// `tool: NAME ARGS` as (name, args), args `{}` when absent; `None` without a name.
fn tool_call_of(segment: &str) -> Option<(&str, &str)> {
    let call = segment.strip_prefix("tool:")?.trim_start();
    let name_end = call.find(|c: char| c.is_whitespace() || c == '{').unwrap_or(call.len());
    let (name, args) = call.split_at(name_end);
    if name.is_empty() {
        return None;
    }
    let args = args.trim();
    Some((name, if args.is_empty() { "{}" } else { args }))
}

/// The scripted answer to `request`.
pub(crate) fn answer(request: &ModelRequest) -> Events {
    let input = input_tokens(&request.messages);
    // The engine's own housekeeping calls, recognized by their instruction, get
    // deterministic answers: a title from the prompt's first words, and a summary that
    // names how much it folded and where the conversation started.
    let system = request.system.as_deref().unwrap_or("");
    let last_text = request.messages.last().map(Message::text).unwrap_or_default();
    if system.starts_with(spool_engine::context::TITLE_INSTRUCTION) {
        return text_reply(words(&title(last_text.trim())), input);
    }
    if system.starts_with(spool_engine::context::SUMMARY_INSTRUCTION) {
        let lines = last_text.lines().filter(|l| l.starts_with("user: ")).count();
        let first = last_text.lines().find_map(|l| l.strip_prefix("user: ")).unwrap_or("");
        let summary = format!(
            "Summary: {lines} earlier user messages, starting with \"{}\".",
            truncate_chars(first, RESULT_LINE_CHARS)
        );
        return text_reply(words(&summary), input);
    }
    match request.messages.last() {
        Some(message @ Message::User { .. }) => {
            let prompt = message.text();
            let answer = match directive(prompt.trim()) {
                Directive::Echo(text) => text_reply(words(text), input),
                Directive::Stream(n) => counted_reply(n, input),
                Directive::Think { thought, answer } => thinking_reply(words(thought), words(answer), input),
                Directive::Tool { name, args } => {
                    let id = format!("call_{}", tool_calls_so_far(&request.messages) + 1);
                    tool_call(id, name.to_owned(), fragments(args), input)
                }
                Directive::Tools(calls) => {
                    let before = tool_calls_so_far(&request.messages);
                    let calls: Vec<_> = calls
                        .into_iter()
                        .enumerate()
                        .map(|(i, (name, args))| (format!("call_{}", before + i + 1), name.to_owned(), fragments(args)))
                        .collect();
                    tool_calls(calls, input)
                }
                Directive::Other(prompt) => {
                    let reply = format!("You said: \"{}\"", truncate_chars(prompt, PROMPT_QUOTE_CHARS));
                    text_reply(words(&reply), input)
                }
            };
            // What came with the prompt, first: tests read the path a file took from it.
            match received(message, &request.files) {
                Some(lines) => Box::new(std::iter::once(ModelEvent::Text(lines)).chain(answer)),
                None => answer,
            }
        }
        Some(Message::ToolResult { tool_name, content, is_error, .. }) => {
            text_reply(words(&result_summary(tool_name, content, *is_error)), input)
        }
        // The engine always ends a request with a prompt or a tool result; answering
        // anything else plainly keeps the model total instead of failing a run.
        Some(Message::Assistant { .. }) | None => text_reply(words("Nothing to reply to."), input),
    }
}

/// One line per file of the prompt: `Received shot.png (image/png, 5120 bytes, sha256
/// 0123abcd…, bytes match)`, the hash being that of the bytes the request carried, or
/// `bytes missing` when it carried none.
fn received(message: &Message, files: &spool_engine::FileBytes) -> Option<String> {
    use sha2::{Digest, Sha256};
    let lines: Vec<String> = message
        .files()
        .filter_map(|file| {
            let Content::File { name, media_type, size, sha256, .. } = file else { return None };
            let got = match files.get(sha256) {
                Some(bytes) => {
                    let hash: String = Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect();
                    let verdict = if &hash == sha256 { "bytes match" } else { "bytes differ" };
                    format!("sha256 {}…, {verdict}", &hash[..8])
                }
                None => "bytes missing".to_owned(),
            };
            Some(format!("Received {name} ({media_type}, {size} bytes, {got})\n"))
        })
        .collect();
    (!lines.is_empty()).then(|| lines.concat())
}

/// A title for a first prompt that reads like one: a directive becomes a short phrase
/// (`tool: read {"path":"README.md"}` is "Read README.md", not the JSON), anything else
/// its first six words without brackets or quotes. Never empty: the engine would fall
/// back to the raw first line.
fn title(prompt: &str) -> String {
    let phrase = match directive(prompt) {
        Directive::Echo(text) => format!("Echo {}", plain_words(text, 5)),
        Directive::Stream(n) => format!("Stream {n} words"),
        Directive::Think { thought, .. } => format!("Think {}", plain_words(thought, 5)),
        Directive::Tool { name, args } => {
            // The argument values (not their keys) say what the call is about.
            let values = match serde_json::from_str::<serde_json::Value>(args) {
                Ok(serde_json::Value::Object(map)) => map
                    .values()
                    .map(|v| match v {
                        serde_json::Value::String(s) => s.clone(),
                        other => other.to_string(),
                    })
                    .collect::<Vec<_>>()
                    .join(" "),
                _ => args.to_owned(),
            };
            let mut name = name.replace('_', " ");
            if let Some(first) = name.get(..1) {
                name = first.to_uppercase() + &name[1..];
            }
            format!("{name} {}", plain_words(&values, 5))
        }
        Directive::Tools(calls) => {
            let names: Vec<String> = calls.iter().map(|(name, _)| name.replace('_', " ")).collect();
            format!("Call {}", plain_words(&names.join(" and "), 6))
        }
        Directive::Other(text) => plain_words(text, 6),
    };
    let phrase = phrase.trim().to_owned();
    if phrase.is_empty() { "Untitled".to_owned() } else { phrase }
}

/// The first `count` words of `text` once JSON and quoting punctuation is dropped, and
/// Markdown's marks (emphasis around a word, a list's dash, a table's bars): a title
/// is shown as plain text.
fn plain_words(text: &str, count: usize) -> String {
    let cleaned: String =
        text.chars().map(|c| if matches!(c, '{' | '}' | '[' | ']' | '"' | '`' | '\\') { ' ' } else { c }).collect();
    let words: Vec<&str> = cleaned
        .split_whitespace()
        .map(|w| w.trim_matches(|c| matches!(c, ',' | ':' | '\'' | '*' | '_' | '#' | '|')))
        .filter(|w| w.chars().any(char::is_alphanumeric))
        .take(count)
        .collect();
    words.join(" ")
}

/// `Tool NAME returned N lines: FIRST_LINE` or `Tool NAME failed: FIRST_LINE`.
fn result_summary(tool_name: &str, content: &[Content], is_error: bool) -> String {
    let text: String = content
        .iter()
        .filter_map(|c| match c {
            Content::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    let lines = text.lines().count();
    let first = truncate_chars(text.lines().next().unwrap_or(""), RESULT_LINE_CHARS);
    let head = if is_error {
        format!("Tool {tool_name} failed")
    } else {
        format!("Tool {tool_name} returned {lines} {}", if lines == 1 { "line" } else { "lines" })
    };
    // No dangling colon when there is nothing to quote.
    if first.is_empty() { head } else { format!("{head}: {first}") }
}

/// Characters of all message text, divided by 4 and rounded up: a stable stand-in for
/// a tokenizer.
fn input_tokens(messages: &[Message]) -> u64 {
    let chars: usize = messages.iter().map(|m| m.text().chars().count()).sum();
    (chars as u64).div_ceil(4)
}

fn tool_calls_so_far(messages: &[Message]) -> usize {
    messages
        .iter()
        .filter(|m| matches!(m, Message::Assistant { .. }))
        .flat_map(|m| m.content())
        .filter(|c| matches!(c, Content::ToolCall { .. }))
        .count()
}

fn text_reply(deltas: Vec<String>, input: u64) -> Events {
    let output = deltas.len() as u64;
    Box::new(deltas.into_iter().map(ModelEvent::Text).chain(finish(input, output, StopReason::Stop)))
}

/// `think:`: the thought's words as reasoning deltas, then the answer's as text; the
/// reasoning counts in `output` and, on its own, in `reasoning` (as providers count it).
fn thinking_reply(thought: Vec<String>, answer: Vec<String>, input: u64) -> Events {
    let reasoning = thought.len() as u64;
    let output = reasoning + answer.len() as u64;
    let usage = Usage { input, output, reasoning, ..Usage::default() };
    Box::new(
        thought
            .into_iter()
            .map(ModelEvent::Thinking)
            .chain(answer.into_iter().map(ModelEvent::Text))
            .chain([ModelEvent::Usage(usage), ModelEvent::Stop(StopReason::Stop)]),
    )
}

/// `stream: N`: deltas generated as they are pulled.
fn counted_reply(n: u32, input: u64) -> Events {
    Box::new((1..=n).map(|i| ModelEvent::Text(if i == 1 { "w1".to_owned() } else { format!(" w{i}") })).chain(finish(
        input,
        u64::from(n),
        StopReason::Stop,
    )))
}

fn tool_call(id: String, name: String, fragments: Vec<String>, input: u64) -> Events {
    tool_calls(vec![(id, name, fragments)], input)
}

/// One answer calling each of `calls` (id, name, arg fragments) in order.
fn tool_calls(calls: Vec<(String, String, Vec<String>)>, input: u64) -> Events {
    let output = calls.iter().map(|(_, _, fragments)| fragments.len() as u64).sum();
    Box::new(
        calls
            .into_iter()
            .flat_map(|(id, name, fragments)| {
                std::iter::once(ModelEvent::ToolCallStart { id, name })
                    .chain(fragments.into_iter().map(ModelEvent::ToolCallArgs))
            })
            .chain(finish(input, output, StopReason::ToolUse)),
    )
}

fn finish(input: u64, output: u64, stop: StopReason) -> impl Iterator<Item = ModelEvent> + Send {
    [ModelEvent::Usage(Usage { input, output, ..Usage::default() }), ModelEvent::Stop(stop)].into_iter()
}

/// Splits text into deltas of one word each, every word carrying the whitespace before
/// it, so the deltas join back to exactly the input (`"a  b\nc"` → `"a"`, `"  b"`,
/// `"\nc"`).
pub(crate) fn words(text: &str) -> Vec<String> {
    let mut deltas = Vec::new();
    let mut start = 0;
    let mut in_word = false;
    for (i, c) in text.char_indices() {
        if c.is_whitespace() {
            if in_word {
                deltas.push(text[start..i].to_owned());
                start = i;
                in_word = false;
            }
        } else {
            in_word = true;
        }
    }
    if start < text.len() {
        deltas.push(text[start..].to_owned());
    }
    deltas
}

/// Splits tool arguments into up to three non-empty pieces on character boundaries, so
/// the engine's accumulation of argument fragments is exercised on every call.
fn fragments(args: &str) -> Vec<String> {
    let cut = |at: usize| (at..=args.len()).find(|&i| args.is_char_boundary(i)).unwrap_or(args.len());
    let (a, b) = (cut(args.len() / 3), cut(args.len() * 2 / 3));
    [&args[..a], &args[a..b], &args[b..]].into_iter().filter(|piece| !piece.is_empty()).map(str::to_owned).collect()
}

/// At most `max` characters of `s`, with `…` appended when something was cut.
fn truncate_chars(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((end, _)) => format!("{}…", &s[..end]),
        None => s.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn request(messages: Vec<Message>) -> ModelRequest {
        ModelRequest { system: None, messages, tools: Vec::new(), files: Default::default() }
    }

    fn prompt(text: &str) -> ModelRequest {
        request(vec![Message::user_text(text, 0)])
    }

    fn events(req: &ModelRequest) -> Vec<ModelEvent> {
        answer(req).collect()
    }

    fn text(s: &str) -> ModelEvent {
        ModelEvent::Text(s.to_owned())
    }

    #[test]
    fn a_prompt_with_files_is_answered_with_what_came_and_whether_the_bytes_match() {
        let bytes = bytes::Bytes::from_static(b"hello");
        // SHA-256 of "hello".
        let sha = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824";
        let file = |name: &str, sha: &str| Content::File {
            id: spool_protocol::AttachmentId::new(),
            name: name.into(),
            media_type: "text/plain".into(),
            size: 5,
            sha256: sha.into(),
            url: String::new(),
        };
        let content =
            vec![file("a.txt", sha), file("b.txt", &"0".repeat(64)), Content::Text { text: "echo: ok".into() }];
        let mut req = request(vec![Message::User { content, timestamp: 0 }]);
        req.files.insert(sha.into(), bytes.clone());
        req.files.insert("0".repeat(64), bytes);
        assert_eq!(
            joined_text(&events(&req)),
            "Received a.txt (text/plain, 5 bytes, sha256 2cf24dba…, bytes match)\n\
             Received b.txt (text/plain, 5 bytes, sha256 2cf24dba…, bytes differ)\nok"
        );
    }

    fn joined_text(events: &[ModelEvent]) -> String {
        events
            .iter()
            .filter_map(|e| match e {
                ModelEvent::Text(t) => Some(t.as_str()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn titles_read_like_titles_not_json() {
        assert_eq!(title(r#"tool: read {"path":"README.md"}"#), "Read README.md");
        assert_eq!(title(r#"tool: bash {"command": "ls -la"}"#), "Bash ls -la");
        assert_eq!(title("tool: todo_write {}"), "Todo write");
        assert_eq!(title("echo: hello big world"), "Echo hello big world");
        assert_eq!(title("stream: 40"), "Stream 40 words");
        assert_eq!(title("please fix the parser bug in main.rs today"), "please fix the parser bug in");
        assert_eq!(title(r#"{"a": "b"}"#), "a b");
        assert_eq!(title("{}"), "Untitled");
        // Markdown's marks are not words: a list's dashes, emphasis, a table's bars.
        assert_eq!(title("echo: Here is **a list**:\n\n- one\n- two"), "Echo Here is a list one");
        assert_eq!(title("# Fix | the _parser_ -"), "Fix the parser");
    }

    #[test]
    fn echo_streams_each_word_with_its_leading_whitespace() {
        let req = prompt("echo: hello big world");
        assert_eq!(
            events(&req),
            vec![
                text("hello"),
                text(" big"),
                text(" world"),
                // "echo: hello big world" is 21 chars → 6 tokens.
                ModelEvent::Usage(Usage { input: 6, output: 3, ..Usage::default() }),
                ModelEvent::Stop(StopReason::Stop),
            ]
        );
    }

    #[test]
    fn echo_keeps_inner_whitespace_and_utf8_exactly() {
        let req = prompt("  echo: héllo 🌍  wörld\n\tnext  ");
        let evs = events(&req);
        assert_eq!(joined_text(&evs), "héllo 🌍  wörld\n\tnext");
        assert_eq!(evs[..4], [text("héllo"), text(" 🌍"), text("  wörld"), text("\n\tnext")]);
    }

    #[test]
    fn stream_sends_n_numbered_deltas() {
        let evs = events(&prompt("stream: 5"));
        assert_eq!(
            evs,
            vec![
                text("w1"),
                text(" w2"),
                text(" w3"),
                text(" w4"),
                text(" w5"),
                ModelEvent::Usage(Usage { input: 3, output: 5, ..Usage::default() }),
                ModelEvent::Stop(StopReason::Stop),
            ]
        );
    }

    #[test]
    fn stream_zero_sends_only_usage_and_stop() {
        assert_eq!(
            events(&prompt("stream: 0")),
            vec![
                ModelEvent::Usage(Usage { input: 3, output: 0, ..Usage::default() }),
                ModelEvent::Stop(StopReason::Stop)
            ]
        );
    }

    #[test]
    fn stream_at_the_limit_is_honoured() {
        let evs: Vec<_> = answer(&prompt("stream: 1000000")).collect();
        assert_eq!(evs.len(), 1_000_002);
        assert_eq!(evs[999_999], text(" w1000000"));
    }

    #[test]
    fn malformed_stream_counts_are_ordinary_prompts() {
        for p in ["stream: 1000001", "stream: -1", "stream: +3", "stream: 3x", "stream:", "stream: 99999999999"] {
            assert_eq!(joined_text(&events(&prompt(p))), format!("You said: \"{p}\""), "{p}");
        }
    }

    #[test]
    fn think_streams_reasoning_then_the_answer() {
        assert_eq!(
            events(&prompt("think: check the  tests | All green")),
            vec![
                ModelEvent::Thinking("check".into()),
                ModelEvent::Thinking(" the".into()),
                ModelEvent::Thinking("  tests".into()),
                text("All"),
                text(" green"),
                // "think: check the  tests | All green" is 35 chars → 9 tokens.
                ModelEvent::Usage(Usage { input: 9, output: 5, reasoning: 3, ..Usage::default() }),
                ModelEvent::Stop(StopReason::Stop),
            ]
        );
        // Without a `|` it only thinks.
        let evs = events(&prompt("think: hmm"));
        assert_eq!(evs[0], ModelEvent::Thinking("hmm".into()));
        assert_eq!(joined_text(&evs), "");
        assert_eq!(title("think: check the tests | ok"), "Think check the tests");
    }

    #[test]
    fn tool_directive_calls_the_tool_with_fragmented_args() {
        let evs = events(&prompt(r#"tool: read {"path": "src/main.rs"}"#));
        assert_eq!(evs[0], ModelEvent::ToolCallStart { id: "call_1".into(), name: "read".into() });
        let args: Vec<&str> = evs
            .iter()
            .filter_map(|e| match e {
                ModelEvent::ToolCallArgs(a) => Some(a.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(args.len(), 3);
        assert_eq!(args.concat(), r#"{"path": "src/main.rs"}"#);
        assert_eq!(evs.len(), 1 + 3 + 2);
        assert_eq!(evs[4], ModelEvent::Usage(Usage { input: 9, output: 3, ..Usage::default() }));
        assert_eq!(evs[5], ModelEvent::Stop(StopReason::ToolUse));
    }

    #[test]
    fn tool_without_args_sends_an_empty_object() {
        assert_eq!(
            events(&prompt("tool: list")),
            vec![
                ModelEvent::ToolCallStart { id: "call_1".into(), name: "list".into() },
                ModelEvent::ToolCallArgs("{".into()),
                ModelEvent::ToolCallArgs("}".into()),
                ModelEvent::Usage(Usage { input: 3, output: 2, ..Usage::default() }),
                ModelEvent::Stop(StopReason::ToolUse),
            ]
        );
    }

    #[test]
    fn tool_args_are_sent_even_when_invalid_or_multibyte() {
        let evs = events(&prompt("tool: read{not json é🌍"));
        assert_eq!(evs[0], ModelEvent::ToolCallStart { id: "call_1".into(), name: "read".into() });
        let args: String = evs
            .iter()
            .filter_map(|e| match e {
                ModelEvent::ToolCallArgs(a) => Some(a.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(args, "{not json é🌍");
    }

    fn calls_of(evs: &[ModelEvent]) -> Vec<(String, String, String)> {
        let mut calls: Vec<(String, String, String)> = Vec::new();
        for e in evs {
            match e {
                ModelEvent::ToolCallStart { id, name } => calls.push((id.clone(), name.clone(), String::new())),
                ModelEvent::ToolCallArgs(a) => calls.last_mut().expect("args after a start").2.push_str(a),
                _ => {}
            }
        }
        calls
    }

    #[test]
    fn several_tool_lines_make_one_answer_with_a_call_each() {
        let evs = events(&prompt("tool: ask {\"q\": \"one\"}\n  tool: list\ntool: read {\n  \"path\": \"a\"\n}"));
        assert_eq!(
            calls_of(&evs),
            vec![
                ("call_1".into(), "ask".into(), r#"{"q": "one"}"#.into()),
                ("call_2".into(), "list".into(), "{}".into()),
                ("call_3".into(), "read".into(), "{\n  \"path\": \"a\"\n}".into()),
            ]
        );
        // One answer: one usage, one stop, after every call.
        let n = evs.len();
        assert!(matches!(evs[n - 2], ModelEvent::Usage(_)));
        assert_eq!(evs[n - 1], ModelEvent::Stop(StopReason::ToolUse));
        assert_eq!(evs.iter().filter(|e| matches!(e, ModelEvent::Stop(_))).count(), 1);
        assert_eq!(title("tool: ask {}\ntool: todo_write {}"), "Call ask and todo write");
    }

    /// An earlier answer of the model that called `list` once (`call_1`).
    fn an_earlier_list_call() -> Message {
        Message::Assistant {
            content: vec![Content::ToolCall {
                id: "call_1".into(),
                name: "list".into(),
                arguments: serde_json::json!({}),
            }],
            stop_reason: Some(StopReason::ToolUse),
            usage: Usage::default(),
            model: "scripted".into(),
            error_message: None,
            timestamp: 0,
        }
    }

    #[test]
    fn several_tool_lines_number_after_earlier_calls() {
        let earlier = an_earlier_list_call();
        let req =
            request(vec![Message::user_text("tool: list", 0), earlier, Message::user_text("tool: a\ntool: b", 0)]);
        let ids: Vec<String> = calls_of(&events(&req)).into_iter().map(|c| c.0).collect();
        assert_eq!(ids, ["call_2", "call_3"]);
    }

    #[test]
    fn a_single_call_with_json_spanning_lines_stays_one_call() {
        let evs = events(&prompt("tool: read {\n  \"path\": \"src/main.rs\"\n}"));
        assert_eq!(calls_of(&evs), vec![("call_1".into(), "read".into(), "{\n  \"path\": \"src/main.rs\"\n}".into())]);
        // A later `tool:` line without a name keeps the whole prompt one call.
        let evs = events(&prompt("tool: list\ntool: {}"));
        assert_eq!(calls_of(&evs), vec![("call_1".into(), "list".into(), "tool: {}".into())]);
    }

    #[test]
    fn tool_without_a_name_is_an_ordinary_prompt() {
        assert_eq!(joined_text(&events(&prompt("tool: {}"))), "You said: \"tool: {}\"");
    }

    #[test]
    fn tool_call_ids_count_earlier_calls() {
        let earlier = an_earlier_list_call();
        let req = request(vec![Message::user_text("tool: list", 0), earlier, Message::user_text("tool: list", 0)]);
        assert_eq!(events(&req)[0], ModelEvent::ToolCallStart { id: "call_2".into(), name: "list".into() });
    }

    #[test]
    fn other_prompts_are_quoted_and_long_ones_cut_on_a_char_boundary() {
        assert_eq!(joined_text(&events(&prompt("  hi there  "))), "You said: \"hi there\"");
        let long = "é".repeat(300);
        assert_eq!(joined_text(&events(&prompt(&long))), format!("You said: \"{}…\"", "é".repeat(200)));
    }

    fn tool_result(text: &str, is_error: bool) -> ModelRequest {
        request(vec![
            Message::user_text("tool: read {}", 0),
            Message::ToolResult {
                tool_call_id: "call_1".into(),
                tool_name: "read".into(),
                content: vec![Content::Text { text: text.into() }],
                is_error,
                timestamp: 0,
                diff: None,
            },
        ])
    }

    #[test]
    fn tool_results_are_summarised_in_one_line() {
        let evs = events(&tool_result("fn main() {\n    println!(\"hi\");\n}\n", false));
        assert_eq!(joined_text(&evs), "Tool read returned 3 lines: fn main() {");
        assert_eq!(evs.last(), Some(&ModelEvent::Stop(StopReason::Stop)));

        let evs = events(&tool_result("no such file or directory: \"x\"\nmore", true));
        assert_eq!(joined_text(&evs), "Tool read failed: no such file or directory: \"x\"");

        assert_eq!(joined_text(&events(&tool_result("", false))), "Tool read returned 0 lines");
        assert_eq!(joined_text(&events(&tool_result("one", false))), "Tool read returned 1 line: one");

        let long = format!("{}\nsecond", "x".repeat(500));
        assert_eq!(
            joined_text(&events(&tool_result(&long, false))),
            format!("Tool read returned 2 lines: {}…", "x".repeat(120))
        );
    }

    #[test]
    fn usage_counts_characters_of_all_messages_rounded_up() {
        // 13 chars ("tool: read {}") + 4 chars ("héé!") = 17 → 5.
        let evs = events(&tool_result("héé!", false));
        let usage = evs.iter().find_map(|e| match e {
            ModelEvent::Usage(u) => Some(*u),
            _ => None,
        });
        let deltas = evs.iter().filter(|e| matches!(e, ModelEvent::Text(_))).count() as u64;
        assert_eq!(usage, Some(Usage { input: 5, output: deltas, ..Usage::default() }));
    }

    #[test]
    fn an_empty_conversation_still_gets_an_answer() {
        let evs = events(&request(Vec::new()));
        assert_eq!(joined_text(&evs), "Nothing to reply to.");
        assert_eq!(evs.last(), Some(&ModelEvent::Stop(StopReason::Stop)));
    }

    proptest! {
        #[test]
        fn words_join_back_to_the_input(s in "[a-zé🌍 \t\n\u{3000}]{0,40}") {
            let deltas = words(&s);
            prop_assert_eq!(deltas.concat(), s.as_str());
            // Every delta but the first starts with whitespace, and each holds exactly one
            // word, except trailing whitespace (never present in a trimmed prompt).
            for d in deltas.iter().skip(1) {
                prop_assert!(d.starts_with(char::is_whitespace));
            }
            let words_in = s.split_whitespace().count();
            let trailing = usize::from(s.ends_with(char::is_whitespace));
            prop_assert_eq!(deltas.len(), words_in + trailing);
        }

        #[test]
        fn fragments_join_back_to_the_args(s in "\\PC{1,40}") {
            let pieces = fragments(&s);
            prop_assert_eq!(pieces.concat(), s.as_str());
            prop_assert!(!pieces.is_empty() && pieces.len() <= 3);
            prop_assert!(pieces.iter().all(|p| !p.is_empty()));
        }
    }
}
