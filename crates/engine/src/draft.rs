//! The assistant message a model call is building, as a pure value: model events in,
//! stream deltas out.
//!
//! A model streams loose events (text, reasoning, the start of a tool call and its
//! argument fragments); clients see `message_update` deltas that open, fill and close
//! content blocks with explicit indexes and offsets. [`Draft`] is that translation and
//! nothing else: it keeps the message, which block is open and how long it is, applies
//! every delta it makes to its own message (through [`apply_delta`], the function the
//! session state uses too, so a snapshot's draft is the message the run commits) and
//! hands the delta to the caller, who publishes it. No clock, no store, no channel: the
//! run loop in `run/` owns those, and these rules are tested on their own below.
//!
//! It keeps the call's usage: what the provider reported, priced; and for a message cut
//! short (stopped, or failed mid-answer), which never hears the provider's report, an
//! estimate of what it used ([`Draft::end`]), so a stopped answer is not free.
//!
//! It also keeps what a checkpoint needs: the deltas since the last one, merged so that
//! a run of text deltas into one block is one delta with all their text ([`unsaved`]).
//! A checkpoint appends those to the stored draft instead of rewriting the whole message,
//! so checkpointing an answer writes about as many bytes as the answer has, not the
//! square of it; the deltas applied in order to the message as it began rebuild it.
//!
//! [`unsaved`]: Draft::unsaved

use crate::context::BYTES_PER_TOKEN;
use crate::models::Price;
use crate::view::apply_delta;
use spool_protocol::event::offset_len;
use spool_protocol::time::Millis;
use spool_protocol::{Message, StopReason, StreamDelta, Usage};

/// The kind of content block that is open, if any.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Block {
    None,
    Text,
    Thinking,
    ToolCall,
}

/// What a model call costs: its model's price, and the estimated size of its prompt
/// ([`crate::context::request_tokens`]) for a call cut short before the provider said.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Billing {
    pub price: Option<Price>,
    pub prompt_tokens: u64,
}

/// The model sent a tool call's arguments with no tool call open.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ArgsOutsideCall;

#[derive(Debug)]
pub(crate) struct Draft {
    message: Message,
    /// The message as it began (no content): what the checkpointed deltas apply to.
    start: Message,
    block: Block,
    /// Bytes (in the deltas' offset unit) of the open block so far.
    block_len: usize,
    /// Bytes (UTF-8) of text, reasoning and tool arguments streamed so far.
    streamed: usize,
    /// The deltas since the last checkpoint, consecutive pieces of a block merged.
    unsaved: Vec<StreamDelta>,
    /// Where the last unsaved piece ends (its offset plus its length): a piece that
    /// starts there continues it. Kept so merging never measures the merged text again.
    unsaved_end: usize,
    /// Token counts reported so far, priced; recorded on the message when it ends.
    usage: Usage,
    billing: Billing,
}

impl Draft {
    /// An empty assistant message of `model`, started at `timestamp`, billed by `billing`.
    pub fn new(model: String, timestamp: Millis, billing: Billing) -> Self {
        let message = Message::Assistant {
            content: Vec::new(),
            stop_reason: None,
            usage: Usage::default(),
            model,
            error_message: None,
            timestamp,
        };
        let start = message.clone();
        Draft {
            message,
            start,
            block: Block::None,
            block_len: 0,
            streamed: 0,
            unsaved: Vec::new(),
            unsaved_end: 0,
            usage: Usage::default(),
            billing,
        }
    }

    pub fn message(&self) -> &Message {
        &self.message
    }

    /// The message as it began, before any content.
    pub fn start(&self) -> &Message {
        &self.start
    }

    /// Bytes of text, reasoning and tool arguments streamed so far (UTF-8).
    pub fn streamed_bytes(&self) -> usize {
        self.streamed
    }

    /// The deltas since the last [`Draft::saved`]: applied in order to the message as
    /// it was then, they give the message as it is now.
    pub fn unsaved(&self) -> &[StreamDelta] {
        &self.unsaved
    }

    /// The unsaved deltas were checkpointed.
    pub fn saved(&mut self) {
        self.unsaved.clear();
    }

    pub fn into_message(self) -> Message {
        self.message
    }

    /// Text to append; opens a text block when another kind is open.
    pub fn text(&mut self, text: String, out: &mut impl FnMut(StreamDelta)) {
        self.open(Block::Text, None, out);
        self.append(text, out, |content_index, offset, delta| StreamDelta::TextDelta { content_index, offset, delta });
    }

    /// Reasoning to append; opens a thinking block when another kind is open.
    pub fn thinking(&mut self, text: String, out: &mut impl FnMut(StreamDelta)) {
        self.open(Block::Thinking, None, out);
        self.append(text, out, |content_index, offset, delta| StreamDelta::ThinkingDelta {
            content_index,
            offset,
            delta,
        });
    }

    /// A new tool call: always its own block, even right after another tool call.
    pub fn tool_call(&mut self, id: String, name: String, out: &mut impl FnMut(StreamDelta)) {
        self.close(out);
        self.open(Block::ToolCall, Some((id, name)), out);
    }

    /// A fragment of the open tool call's JSON arguments.
    pub fn tool_args(&mut self, text: String, out: &mut impl FnMut(StreamDelta)) -> Result<(), ArgsOutsideCall> {
        if self.block != Block::ToolCall {
            return Err(ArgsOutsideCall);
        }
        self.append(text, out, |content_index, offset, delta| StreamDelta::ToolcallDelta {
            content_index,
            offset,
            delta,
        });
        Ok(())
    }

    /// Token counts, priced; several reports add up.
    pub fn add_usage(&mut self, mut usage: Usage) {
        usage.cost = self.billing.price.map_or(0.0, |p| p.cost(&usage));
        self.usage.add(usage);
    }

    /// The model finished on its own: the usage it reported is recorded on the message
    /// and returned (see [`Draft::finish`]).
    pub fn stop(&mut self, reason: StopReason, out: &mut impl FnMut(StreamDelta)) -> Usage {
        self.finish(reason, None, self.usage, out)
    }

    /// The message is cut short: stopped, or failed mid-answer (`error`, already fit to
    /// show, is kept on the message). Providers report usage as they finish, so what
    /// this call did not hear is estimated at [`BYTES_PER_TOKEN`]: the prompt as input,
    /// what streamed (text, reasoning, tool arguments) as output, priced and marked
    /// `estimated`. A call that streamed nothing is charged only what was reported: it
    /// may never have reached the model. The usage is recorded and returned.
    pub fn end(&mut self, reason: StopReason, error: Option<String>, out: &mut impl FnMut(StreamDelta)) -> Usage {
        let mut usage = self.usage;
        if self.streamed > 0 {
            if usage.output == 0 {
                usage.output = (self.streamed as u64).div_ceil(BYTES_PER_TOKEN);
                usage.estimated = true;
            }
            if usage.input == 0 && self.billing.prompt_tokens > 0 {
                usage.input = self.billing.prompt_tokens;
                usage.estimated = true;
            }
            if usage.estimated {
                usage.cost = self.billing.price.map_or(0.0, |p| p.cost(&usage));
            }
        }
        self.finish(reason, error, usage, out)
    }

    /// The open block closes, `usage` and `error` go on the message, and `done` ends it.
    fn finish(
        &mut self,
        reason: StopReason,
        error: Option<String>,
        usage: Usage,
        out: &mut impl FnMut(StreamDelta),
    ) -> Usage {
        self.close(out);
        if let Message::Assistant { error_message, usage: recorded, .. } = &mut self.message {
            *error_message = error;
            *recorded = usage;
        }
        self.push(StreamDelta::Done { stop_reason: reason }, out);
        usage
    }

    fn open(&mut self, kind: Block, call: Option<(String, String)>, out: &mut impl FnMut(StreamDelta)) {
        if self.block == kind {
            return;
        }
        self.close(out);
        let content_index = self.message.content().len();
        let start = match (kind, call) {
            (Block::Thinking, _) => StreamDelta::ThinkingStart { content_index },
            (Block::ToolCall, Some((id, name))) => StreamDelta::ToolcallStart { content_index, id, name },
            _ => StreamDelta::TextStart { content_index },
        };
        self.push(start, out);
        self.block = kind;
        self.block_len = 0;
    }

    fn close(&mut self, out: &mut impl FnMut(StreamDelta)) {
        let Some(content_index) = self.message.content().len().checked_sub(1) else { return };
        let end = match self.block {
            Block::None => return,
            Block::Text => StreamDelta::TextEnd { content_index },
            Block::Thinking => StreamDelta::ThinkingEnd { content_index },
            Block::ToolCall => StreamDelta::ToolcallEnd { content_index },
        };
        self.block = Block::None;
        self.push(end, out);
    }

    /// Appends `text` to the open block as a delta built by `make` (content index,
    /// offset where the text starts, text), advancing the block's length.
    fn append(
        &mut self,
        text: String,
        out: &mut impl FnMut(StreamDelta),
        make: impl FnOnce(usize, usize, String) -> StreamDelta,
    ) {
        let offset = self.block_len;
        self.block_len += offset_len(&text);
        self.streamed += text.len();
        let delta = make(self.message.content().len() - 1, offset, text);
        self.push(delta, out);
    }

    fn push(&mut self, delta: StreamDelta, out: &mut impl FnMut(StreamDelta)) {
        apply_delta(&mut self.message, &delta);
        self.remember(&delta);
        out(delta);
    }

    /// Adds `delta` to the unsaved ones, appended to the last when it continues it (the
    /// same kind of piece, the same block, starting where the last one ends).
    fn remember(&mut self, delta: &StreamDelta) {
        use StreamDelta as D;
        let end = self.unsaved_end;
        if let D::TextDelta { offset, delta: text, .. }
        | D::ThinkingDelta { offset, delta: text, .. }
        | D::ToolcallDelta { offset, delta: text, .. } = delta
        {
            self.unsaved_end = offset + offset_len(text);
        }
        if let Some(last) = self.unsaved.last_mut() {
            let merged = match (last, delta) {
                (
                    D::TextDelta { content_index: i, delta: text, .. },
                    D::TextDelta { content_index: j, offset: p, delta: more },
                )
                | (
                    D::ThinkingDelta { content_index: i, delta: text, .. },
                    D::ThinkingDelta { content_index: j, offset: p, delta: more },
                )
                | (
                    D::ToolcallDelta { content_index: i, delta: text, .. },
                    D::ToolcallDelta { content_index: j, offset: p, delta: more },
                ) if i == j && end == *p => {
                    text.push_str(more);
                    true
                }
                _ => false,
            };
            if merged {
                return;
            }
        }
        self.unsaved.push(delta.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use spool_protocol::Content;

    fn draft() -> Draft {
        Draft::new("scripted".into(), 1_700_000_000_000, Billing::default())
    }

    /// Feeds `steps` and returns the deltas, with `done` at the end.
    fn run(steps: &[Step]) -> (Draft, Vec<StreamDelta>) {
        let mut d = draft();
        let mut deltas = Vec::new();
        let mut out = |delta| deltas.push(delta);
        for step in steps {
            match step.clone() {
                Step::Text(t) => d.text(t, &mut out),
                Step::Thinking(t) => d.thinking(t, &mut out),
                Step::Call(id) => d.tool_call(id, "bash".into(), &mut out),
                Step::Args(t) => {
                    let _ = d.tool_args(t, &mut out);
                }
            }
        }
        d.stop(StopReason::Stop, &mut out);
        (d, deltas)
    }

    #[derive(Clone, Debug)]
    enum Step {
        Text(String),
        Thinking(String),
        Call(String),
        Args(String),
    }

    #[test]
    fn text_opens_one_block_and_counts_offsets() {
        let (d, deltas) = run(&[Step::Text("Hel".into()), Step::Text("lo".into())]);
        assert_eq!(
            deltas,
            vec![
                StreamDelta::TextStart { content_index: 0 },
                StreamDelta::TextDelta { content_index: 0, offset: 0, delta: "Hel".into() },
                StreamDelta::TextDelta { content_index: 0, offset: 3, delta: "lo".into() },
                StreamDelta::TextEnd { content_index: 0 },
                StreamDelta::Done { stop_reason: StopReason::Stop },
            ]
        );
        assert_eq!(d.message().content(), &[Content::Text { text: "Hello".into() }]);
    }

    #[test]
    fn a_new_kind_closes_the_open_block_and_each_tool_call_is_its_own() {
        let (_, deltas) = run(&[
            Step::Thinking("hm".into()),
            Step::Text("ok".into()),
            Step::Call("c1".into()),
            Step::Args("{}".into()),
            Step::Call("c2".into()),
        ]);
        let kinds: Vec<String> =
            deltas.iter().map(|d| format!("{d:?}").split([' ', '{']).next().unwrap().into()).collect();
        assert_eq!(
            kinds,
            [
                "ThinkingStart",
                "ThinkingDelta",
                "ThinkingEnd",
                "TextStart",
                "TextDelta",
                "TextEnd",
                "ToolcallStart",
                "ToolcallDelta",
                "ToolcallEnd",
                "ToolcallStart",
                "ToolcallEnd",
                "Done"
            ]
        );
    }

    #[test]
    fn the_unsaved_deltas_are_merged_and_rebuild_the_message_from_the_last_checkpoint() {
        let mut d = draft();
        let mut out = |_| {};
        d.text("Hel".into(), &mut out);
        d.text("lo".into(), &mut out);
        assert_eq!(
            d.unsaved(),
            [
                StreamDelta::TextStart { content_index: 0 },
                StreamDelta::TextDelta { content_index: 0, offset: 0, delta: "Hello".into() },
            ],
            "one delta per block piece, not one per token"
        );
        let mut rebuilt = d.start().clone();
        let checkpoint = |d: &mut Draft, rebuilt: &mut Message| {
            d.unsaved().iter().for_each(|delta| apply_delta(rebuilt, delta));
            d.saved();
        };
        checkpoint(&mut d, &mut rebuilt);
        d.text(" wo".into(), &mut out);
        d.thinking("hm".into(), &mut out);
        d.tool_call("c1".into(), "bash".into(), &mut out);
        d.tool_args("{\"a\"".into(), &mut out).expect("in a call");
        d.tool_args(":1}".into(), &mut out).expect("in a call");
        assert_eq!(d.unsaved().len(), 7, "{:?}", d.unsaved());
        checkpoint(&mut d, &mut rebuilt);
        assert_eq!(rebuilt, *d.message());
        assert_eq!(d.streamed_bytes(), "Hello wohm{\"a\":1}".len());
    }

    #[test]
    fn arguments_without_a_tool_call_are_refused_and_change_nothing() {
        let mut d = draft();
        let mut deltas = Vec::new();
        d.text("a".into(), &mut |x| deltas.push(x));
        assert_eq!(d.tool_args("{}".into(), &mut |x| deltas.push(x)), Err(ArgsOutsideCall));
        assert_eq!(deltas.len(), 2);
    }

    fn usage_of(d: &Draft) -> Usage {
        let Message::Assistant { usage, .. } = d.message() else { unreachable!("a draft is an answer") };
        *usage
    }

    #[test]
    fn a_finished_message_keeps_the_reported_usage_priced() {
        let price = Price { input: 1_000_000.0, output: 2_000_000.0, ..Price::default() };
        let mut done = Draft::new("m".into(), 0, Billing { price: Some(price), prompt_tokens: 99 });
        done.text("hello there".into(), &mut |_| {});
        let usage = Usage { input: 10, output: 3, ..Usage::default() };
        done.add_usage(usage);
        done.add_usage(usage);
        let want = Usage { input: 20, output: 6, cost: 20.0 + 12.0, ..Usage::default() };
        assert_eq!(done.stop(StopReason::Stop, &mut |_| {}), want);
        assert_eq!(usage_of(&done), want, "reported, not estimated");
    }

    #[test]
    fn a_message_cut_short_estimates_what_the_provider_did_not_report() {
        let price = Price { input: 1_000_000.0, output: 2_000_000.0, ..Price::default() };
        let billing = Billing { price: Some(price), prompt_tokens: 7 };
        // Nothing reported: 17 bytes streamed are 5 tokens out, the prompt 7 in.
        let mut cut = Draft::new("m".into(), 0, billing);
        cut.thinking("hmm ".into(), &mut |_| {});
        cut.text("half an answ".into(), &mut |_| {});
        cut.tool_call("c1".into(), "bash".into(), &mut |_| {});
        cut.tool_args("{".into(), &mut |_| {}).expect("in a call");
        let want = Usage { input: 7, output: 5, cost: 7.0 + 10.0, estimated: true, ..Usage::default() };
        assert_eq!(cut.end(StopReason::Aborted, None, &mut |_| {}), want);
        assert_eq!(usage_of(&cut), want);

        // Input reported (as some providers do at the start), output not: only that is estimated.
        let mut cut = Draft::new("m".into(), 0, billing);
        cut.add_usage(Usage { input: 40, ..Usage::default() });
        cut.text("abcdefgh".into(), &mut |_| {});
        let usage = cut.end(StopReason::Error, Some("cut".into()), &mut |_| {});
        assert_eq!((usage.input, usage.output, usage.estimated), (40, 2, true));

        // Everything reported: nothing to estimate.
        let mut cut = Draft::new("m".into(), 0, billing);
        cut.text("abcdefgh".into(), &mut |_| {});
        cut.add_usage(Usage { input: 40, output: 2, ..Usage::default() });
        assert!(!cut.end(StopReason::Aborted, None, &mut |_| {}).estimated);

        // Nothing streamed: the call may never have reached the model; nothing is charged.
        let mut cut = Draft::new("m".into(), 0, billing);
        assert_eq!(cut.end(StopReason::Aborted, None, &mut |_| {}), Usage::default());
    }

    fn step() -> impl Strategy<Value = Step> {
        let text = "[a-zé🦀 ]{0,6}";
        prop_oneof![
            text.prop_map(Step::Text),
            text.prop_map(Step::Thinking),
            "c[0-9]".prop_map(Step::Call),
            text.prop_map(Step::Args),
        ]
    }

    proptest! {
        /// What a client rebuilds from the deltas alone is the message the run commits,
        /// every delta's offset is where its block stood, and blocks never interleave.
        #[test]
        fn the_deltas_rebuild_the_message(steps in prop::collection::vec(step(), 0..40)) {
            let (d, deltas) = run(&steps);
            let mut rebuilt = draft().into_message();
            let mut open: Option<usize> = None;
            for delta in &deltas {
                match delta {
                    StreamDelta::TextStart { content_index }
                    | StreamDelta::ThinkingStart { content_index }
                    | StreamDelta::ToolcallStart { content_index, .. } => {
                        prop_assert_eq!(open, None);
                        prop_assert_eq!(*content_index, rebuilt.content().len());
                        open = Some(*content_index);
                    }
                    StreamDelta::TextEnd { content_index }
                    | StreamDelta::ThinkingEnd { content_index }
                    | StreamDelta::ToolcallEnd { content_index } => {
                        prop_assert_eq!(open.take(), Some(*content_index));
                    }
                    StreamDelta::TextDelta { content_index, offset, .. }
                    | StreamDelta::ThinkingDelta { content_index, offset, .. }
                    | StreamDelta::ToolcallDelta { content_index, offset, .. } => {
                        prop_assert_eq!(open, Some(*content_index));
                        let so_far = match &rebuilt.content()[*content_index] {
                            Content::Text { text } => offset_len(text),
                            Content::Thinking { thinking } => offset_len(thinking),
                            Content::ToolCall { arguments, .. } => offset_len(arguments.as_str().unwrap_or("")),
                            Content::File { .. } => unreachable!("a model streams no files"),
                        };
                        prop_assert_eq!(*offset, so_far);
                    }
                    _ => {}
                }
                apply_delta(&mut rebuilt, delta);
            }
            prop_assert_eq!(open, None);
            prop_assert_eq!(&rebuilt.content(), &d.message().content());
            // The merged deltas a checkpoint stores rebuild it too.
            let mut checkpointed = d.start().clone();
            d.unsaved().iter().for_each(|delta| apply_delta(&mut checkpointed, delta));
            prop_assert_eq!(&checkpointed.content(), &d.message().content());
        }
    }
}
