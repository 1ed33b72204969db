//! What the provider tests share: the fake provider (`spool_test_support::Fake`, also
//! used by the server's tests), fast retries, and readers of a model stream.

#![allow(dead_code)] // Each test file uses its own part of this module.

use futures::StreamExt;
use spool_engine::{ModelError, ModelEvent, ModelStream};
use spool_model::RetryPolicy;
use std::time::Duration;

pub use spool_test_support::{End, Fake, Reply, split_awkwardly};

/// Retries that wait milliseconds, not seconds, so tests stay fast.
pub fn quick_retries() -> RetryPolicy {
    RetryPolicy {
        max_retries: 3,
        initial_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(5),
        max_retry_after: Duration::from_millis(20),
    }
}

/// Everything the stream yields, up to and including its first error.
pub async fn collect(stream: ModelStream) -> Vec<Result<ModelEvent, ModelError>> {
    let all = async {
        let mut stream = stream;
        let mut out = Vec::new();
        while let Some(item) = stream.next().await {
            let failed = item.is_err();
            out.push(item);
            if failed {
                break;
            }
        }
        out
    };
    tokio::time::timeout(Duration::from_secs(10), all).await.expect("the stream ends within 10 s")
}

/// The events with consecutive text and thinking merged, as the engine builds blocks;
/// the split of the text into deltas depends on the network and is not asserted.
pub fn merged(events: Vec<Result<ModelEvent, ModelError>>) -> Vec<Result<ModelEvent, ModelError>> {
    let mut out: Vec<Result<ModelEvent, ModelError>> = Vec::new();
    for event in events {
        match (out.last_mut(), event) {
            (Some(Ok(ModelEvent::Text(a))), Ok(ModelEvent::Text(b))) => a.push_str(&b),
            (Some(Ok(ModelEvent::Thinking(a))), Ok(ModelEvent::Thinking(b))) => a.push_str(&b),
            (Some(Ok(ModelEvent::ToolCallArgs(a))), Ok(ModelEvent::ToolCallArgs(b))) => a.push_str(&b),
            (_, event) => out.push(event),
        }
    }
    out
}
