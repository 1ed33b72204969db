//! `ScriptedModel`: the `Model` implementation over the script in `script.rs`, adding
//! only pacing. With no delay the events go out through `stream::iter`, which costs
//! nothing per event beyond producing it, so benchmarks measure the server rather than
//! the model. With a delay, each delta after the first waits that long on a tokio
//! timer; dropping the stream drops the timer, which is how a run's abort cancels it.

use crate::script;
use async_trait::async_trait;
use futures::{StreamExt, stream};
use spool_engine::{Inputs, Model, ModelError, ModelEvent, ModelRequest, ModelStream};
use std::time::Duration;

/// The offline, deterministic model described in the crate documentation.
#[derive(Clone, Debug, Default)]
pub struct ScriptedModel {
    delay: Duration,
    /// `scripted:text-only`: reads no images or PDFs, for tests of a model without vision.
    text_only: bool,
}

impl ScriptedModel {
    /// A scripted model pausing `delay` between consecutive deltas (zero: no pause).
    pub fn new(delay: Duration) -> Self {
        Self { delay, text_only: false }
    }

    /// A scripted model that reads text only (`scripted:text-only`).
    pub fn text_only(self) -> Self {
        Self { text_only: true, ..self }
    }

    pub fn delay(&self) -> Duration {
        self.delay
    }
}

#[async_trait]
impl Model for ScriptedModel {
    fn name(&self) -> String {
        if self.text_only { "scripted:text-only" } else { "scripted" }.to_owned()
    }

    fn inputs(&self) -> Inputs {
        Inputs { images: !self.text_only, pdf: !self.text_only }
    }

    async fn stream(&self, request: ModelRequest) -> Result<ModelStream, ModelError> {
        let events = script::answer(&request);
        if self.delay.is_zero() {
            return Ok(stream::iter(events.map(Ok)).boxed());
        }
        let delay = self.delay;
        // The state carries whether a delta was already sent: the pause goes *between*
        // deltas, so the first arrives at once and the usage and stop that follow the
        // last delta are not held back either.
        let paced = stream::unfold((events, false), move |(mut events, mut delta_sent)| async move {
            let event = events.next()?;
            if matches!(event, ModelEvent::Text(_) | ModelEvent::Thinking(_) | ModelEvent::ToolCallArgs(_)) {
                if delta_sent {
                    tokio::time::sleep(delay).await;
                }
                delta_sent = true;
            }
            Some((Ok(event), (events, delta_sent)))
        });
        Ok(paced.boxed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;
    use spool_protocol::{Message, StopReason, Usage};
    use tokio::time::Instant;

    fn prompt(text: &str) -> ModelRequest {
        ModelRequest {
            system: None,
            messages: vec![Message::user_text(text, 0)],
            tools: Vec::new(),
            files: Default::default(),
        }
    }

    async fn collect(model: &ScriptedModel, text: &str) -> Vec<ModelEvent> {
        let stream = model.stream(prompt(text)).await.expect("the scripted model never fails");
        stream.map(|e| e.expect("the scripted model never fails")).collect().await
    }

    #[tokio::test]
    async fn streams_the_script_without_delay() {
        let model = ScriptedModel::default();
        assert_eq!(model.name(), "scripted");
        assert_eq!(
            collect(&model, "echo: hello big world").await,
            vec![
                ModelEvent::Text("hello".into()),
                ModelEvent::Text(" big".into()),
                ModelEvent::Text(" world".into()),
                ModelEvent::Usage(Usage { input: 6, output: 3, ..Usage::default() }),
                ModelEvent::Stop(StopReason::Stop),
            ]
        );
    }

    #[tokio::test]
    async fn utf8_echo_survives_the_stream() {
        let events = collect(&ScriptedModel::default(), "echo: héllo 🌍 wörld").await;
        let text: String = events
            .iter()
            .filter_map(|e| match e {
                ModelEvent::Text(t) => Some(t.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(text, "héllo 🌍 wörld");
    }

    /// Without a delay nothing waits: the whole answer is ready on the first poll, with
    /// no timer and no yield between events (either would leave the stream pending).
    /// How fast that is, is the benchmarks' business (BENCHMARKS.md).
    #[test]
    fn ten_thousand_deltas_without_delay_never_wait() {
        let model = ScriptedModel::default();
        let events = collect(&model, "stream: 10000").now_or_never().expect("ready without waiting");
        assert_eq!(events.len(), 10_002);
        // Every delta, in order, then the usage and the stop.
        for (i, event) in events[..10_000].iter().enumerate() {
            let want = if i == 0 { "w1".to_owned() } else { format!(" w{}", i + 1) };
            assert_eq!(event, &ModelEvent::Text(want));
        }
        assert!(matches!(events[10_000], ModelEvent::Usage(Usage { output: 10_000, .. })), "{:?}", events[10_000]);
        assert_eq!(events[10_001], ModelEvent::Stop(StopReason::Stop));
    }

    #[tokio::test(start_paused = true)]
    async fn delay_spaces_consecutive_deltas() {
        let delay = Duration::from_millis(40);
        let model = ScriptedModel::new(delay);
        let mut stream = model.stream(prompt("stream: 4")).await.expect("the scripted model never fails");
        let start = Instant::now();
        let mut arrivals = Vec::new();
        while let Some(event) = stream.next().await {
            arrivals.push((event.expect("the scripted model never fails"), start.elapsed()));
        }
        let at = |ms: u64| Duration::from_millis(ms);
        assert_eq!(
            arrivals,
            vec![
                (ModelEvent::Text("w1".into()), at(0)),
                (ModelEvent::Text(" w2".into()), at(40)),
                (ModelEvent::Text(" w3".into()), at(80)),
                (ModelEvent::Text(" w4".into()), at(120)),
                (ModelEvent::Usage(Usage { input: 3, output: 4, ..Usage::default() }), at(120)),
                (ModelEvent::Stop(StopReason::Stop), at(120)),
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn delay_also_spaces_tool_argument_fragments() {
        let model = ScriptedModel::new(Duration::from_millis(10));
        let mut stream = model.stream(prompt("tool: list {}")).await.expect("the scripted model never fails");
        let start = Instant::now();
        let mut last = None;
        while let Some(event) = stream.next().await {
            last = Some((event.expect("the scripted model never fails"), start.elapsed()));
        }
        // Two fragments ("{", "}"): one pause between them.
        assert_eq!(last, Some((ModelEvent::Stop(StopReason::ToolUse), Duration::from_millis(10))));
    }
}
