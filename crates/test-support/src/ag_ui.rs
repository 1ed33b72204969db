//! Reading AG-UI events (as JSON) the way a client shows them: shared by the AG-UI
//! dialect's unit tests and the server's tests of whole streams.

use serde_json::Value;

/// The user text messages of AG-UI events, in order: `(messageId, text)`, the text
/// joined from the `TEXT_MESSAGE_CONTENT` deltas of that message.
pub fn user_texts(events: &[Value]) -> Vec<(String, String)> {
    let starts = events.iter().filter(|e| e["type"] == "TEXT_MESSAGE_START" && e["role"] == "user");
    starts
        .map(|start| {
            let id = start["messageId"].as_str().expect("messageId").to_owned();
            let text = events
                .iter()
                .filter(|e| e["type"] == "TEXT_MESSAGE_CONTENT" && e["messageId"] == id.as_str())
                .filter_map(|e| e["delta"].as_str())
                .collect();
            (id, text)
        })
        .collect()
}
