//! What a model call sees (seed 003's context rules): the system prompt, the session's
//! confirmed facts, the summary of turns that compaction folded away, and the recent
//! messages verbatim.
//!
//! Facts are written only from tool calls that succeeded or from a person confirming
//! something (`POST /api/sessions/:id/facts`), never from the model's own text, so the
//! model cannot talk itself into "knowing" something. When the estimated size of the
//! verbatim part passes the budget, older turns are summarized by the model and the
//! summary replaces them in later calls; the store keeps every message, so history
//! endpoints still return everything.

use crate::ToolSpec;
use crate::model::ModelRequest;
use spool_protocol::{Fact, FactSource, Message, SessionMemory};

/// The default system prompt of a coding-agent session.
pub const SYSTEM_PROMPT: &str = "You are Spool, a careful coding agent working in the user's project directory. \
Use the tools to look before you change anything, keep changes small, and say what you did.";

/// First words of the instruction for a title call; the scripted model recognizes it.
pub const TITLE_INSTRUCTION: &str = "Write a title for this conversation";
/// First words of the instruction for a summary call; the scripted model recognizes it.
pub const SUMMARY_INSTRUCTION: &str = "Summarize the conversation so far";

/// Most facts kept per session; the oldest go first.
pub const MAX_FACTS: usize = 50;
/// Longest fact text.
pub const MAX_FACT_CHARS: usize = 300;

/// The rough size of a token, in bytes of UTF-8, for the estimates below: about right for
/// English prose and code, low for scripts that take several bytes a character.
pub const BYTES_PER_TOKEN: u64 = 4;

/// A rough token estimate ([`BYTES_PER_TOKEN`]), enough to decide when to compact.
pub fn estimate_tokens(messages: &[Message]) -> u64 {
    let chars: usize = messages
        .iter()
        .map(|m| {
            m.content()
                .iter()
                .map(|c| match c {
                    spool_protocol::Content::Text { text } => text.len(),
                    spool_protocol::Content::Thinking { thinking } => thinking.len(),
                    spool_protocol::Content::ToolCall { arguments, name, .. } => {
                        name.len() + arguments.to_string().len()
                    }
                    // An image costs providers about 1,600 tokens whatever its bytes; a
                    // PDF or a text file about its size.
                    spool_protocol::Content::File { media_type, size, .. } if media_type.starts_with("image/") => {
                        1600 * BYTES_PER_TOKEN as usize
                    }
                    spool_protocol::Content::File { size, .. } => usize::try_from(*size).unwrap_or(usize::MAX),
                })
                .sum::<usize>()
        })
        .sum();
    (chars as u64).div_ceil(BYTES_PER_TOKEN)
}

/// A rough token estimate of a whole request (system prompt, messages, tool specs): what
/// a model call cut short before the provider reported its usage is charged as input.
pub fn request_tokens(request: &ModelRequest) -> u64 {
    let system = request.system.as_deref().map_or(0, str::len);
    let tools: usize = request.tools.iter().map(|t| serde_json::to_string(t).map_or(0, |s| s.len())).sum();
    estimate_tokens(&request.messages) + ((system + tools) as u64).div_ceil(BYTES_PER_TOKEN)
}

/// The request for the next model call; `verbatim` is the conversation after the part
/// the summary replaced.
pub fn assemble(system: &str, memory: &SessionMemory, verbatim: &[Message], tools: Vec<ToolSpec>) -> ModelRequest {
    let mut prompt = system.to_owned();
    if !memory.facts.is_empty() {
        prompt.push_str("\n\nConfirmed facts (from successful tool results or the user's confirmation):");
        for f in &memory.facts {
            prompt.push_str("\n- ");
            prompt.push_str(&f.text);
        }
    }
    if let Some(summary) = &memory.summary {
        prompt.push_str(&format!(
            "\n\nSummary of the {} earlier messages of this conversation:\n{summary}",
            memory.summarized_before
        ));
    }
    ModelRequest { system: Some(prompt), messages: verbatim.to_vec(), tools, files: Default::default() }
}

/// Where compaction should cut the verbatim part of the conversation (the part after
/// the summary): how many of its messages to fold, up to the start of the
/// second-to-last user round, so the latest exchange stays verbatim and no tool result
/// is separated from its call. `None` when there is nothing older than that to fold.
pub fn compaction_cut(verbatim: &[Message]) -> Option<usize> {
    let mut users = verbatim.iter().enumerate().rev().filter(|(_, m)| m.is_user()).map(|(i, _)| i);
    let cut = users.nth(1)?;
    (cut > 0).then_some(cut)
}

/// The summary call: the previous summary plus the turns to fold, as a transcript.
pub fn summary_request(memory: &SessionMemory, fold: &[Message]) -> ModelRequest {
    let mut transcript = String::new();
    if let Some(previous) = &memory.summary {
        transcript.push_str(&format!("Earlier summary:\n{previous}\n\n"));
    }
    for m in fold {
        let text = match m {
            Message::ToolResult { tool_name, .. } => format!("[{tool_name} result] {}", clip(&m.text(), 2000)),
            _ => clip(&m.text(), 4000),
        };
        transcript.push_str(&format!("{}: {text}\n", m.role()));
    }
    ModelRequest {
        system: Some(format!(
            "{SUMMARY_INSTRUCTION}: keep decisions, file names, facts learned and open questions; \
             be brief and do not invent anything."
        )),
        messages: vec![Message::user_text(transcript, 0)],
        tools: Vec::new(),
        files: Default::default(),
    }
}

/// The title call for a first prompt.
pub fn title_request(prompt: &str) -> ModelRequest {
    ModelRequest {
        system: Some(format!("{TITLE_INSTRUCTION}: at most six words, no quotes, no trailing period.")),
        messages: vec![Message::user_text(clip(prompt, 2000), 0)],
        tools: Vec::new(),
        files: Default::default(),
    }
}

/// Cleans a model's title answer: first non-empty line, quotes trimmed, ≤ 60 chars.
pub fn clean_title(answer: &str) -> Option<String> {
    let line = answer.lines().map(str::trim).find(|l| !l.is_empty())?;
    let line = line.trim_matches(|c| matches!(c, '"' | '\'' | '`' | '*')).trim().trim_end_matches('.');
    (!line.is_empty()).then(|| clip(line, 60))
}

/// Records a fact, keeping the newest [`MAX_FACTS`].
pub fn remember(memory: &mut SessionMemory, text: &str, source: FactSource, at: i64) {
    let text = clip(text.trim(), MAX_FACT_CHARS);
    if text.is_empty() || memory.facts.iter().any(|f| f.text == text) {
        return;
    }
    memory.facts.push(Fact { text, source, at });
    if memory.facts.len() > MAX_FACTS {
        let extra = memory.facts.len() - MAX_FACTS;
        memory.facts.drain(..extra);
    }
}

/// The fact a successful tool call establishes: what was done, and the first line of
/// what came back.
pub fn tool_fact(change: &str, result: &str) -> String {
    let first = result.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("");
    if first.is_empty() { format!("{change}: succeeded") } else { format!("{change}: {}", clip(first, 160)) }
}

fn clip(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_owned()
    } else {
        let mut t: String = s.chars().take(max.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn convo() -> Vec<Message> {
        (0..6)
            .map(|i| if i % 2 == 0 { Message::user_text(format!("q{i}"), 0) } else { Message::user_text("x", 0) })
            .collect()
    }

    #[test]
    fn the_request_carries_facts_summary_and_only_recent_messages() {
        let mut memory = SessionMemory::default();
        remember(&mut memory, "read README.md: # Title", FactSource::Tool, 1);
        remember(&mut memory, "read README.md: # Title", FactSource::Tool, 2);
        memory.summary = Some("earlier: asked about q0".into());
        memory.summarized_before = 4;
        let req = assemble("sys", &memory, &convo()[4..], vec![]);
        let system = req.system.expect("system");
        assert!(system.contains("- read README.md: # Title"));
        assert_eq!(system.matches("README").count(), 1, "a fact is kept once");
        assert!(system.contains("Summary of the 4 earlier messages"));
        assert_eq!(req.messages.len(), 2);
    }

    #[test]
    fn compaction_keeps_the_latest_round_and_cuts_at_a_user_message() {
        let c = vec![Message::user_text("a", 0), Message::user_text("b", 0), Message::user_text("c", 0)];
        assert_eq!(compaction_cut(&c), Some(1));
        // After that cut the verbatim part is `b, c`: nothing older than the latest
        // exchange is left to fold.
        assert_eq!(compaction_cut(&c[1..]), None);
        assert_eq!(compaction_cut(&c[..1]), None);
    }

    #[test]
    fn titles_are_cleaned() {
        assert_eq!(clean_title("\n \"Fix the parser.\"\nmore").as_deref(), Some("Fix the parser"));
        assert_eq!(clean_title("  "), None);
    }
}
