//! The events of seed 002's WebSocket hub as typed payloads: one serde struct per event
//! type, its wire name and its scope (a channel's, or global), and the checks a
//! published event passes before anything is delivered. The engine's `Broadcaster`
//! takes these types, the publish route parses into them, and the OpenAPI document
//! describes them, so one definition serves every way in.
//!
//! Payloads are strict: an unknown field is refused (it is almost always a typo the
//! publisher would rather hear about), and so is a field of the wrong type; the error
//! names the field's path. Fields the seed shows as identifying (`msg_id`, `ticket_id`,
//! `run_id`, …) are required; the rest are optional and, when absent, absent on the
//! wire too: the hub never invents a value a publisher did not give. The seed leaves
//! `quality.scanned`'s report open ("QualityScanReport"), so it is any JSON object; its
//! two reserved quality types and the `Broadcaster` methods it names without a type
//! string (`agent.todo_write`, `messages.processed`, `agent_instance.*`, `image.*`) have
//! payloads Spool defines (see README, "Hub event types"). The payload structs are in
//! `payloads.rs`; this module has the types, scopes, limits and checks.

mod payloads;

pub use payloads::*;

use crate::time::Millis;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;
use utoipa::ToSchema;

/// Where an event goes: to the subscribers of one channel, or to every subscriber.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    Channel,
    Global,
}

/// The channel id of global events on the wire (the seed: "empty channel ID"), and the
/// key of their cursor in a subscribe message's `cursors`.
pub const GLOBAL_CHANNEL: &str = "";

/// Most events one publish call may carry.
pub const MAX_BATCH: usize = 100;
/// Longest channel id, in bytes.
pub const MAX_CHANNEL_ID: usize = 128;
/// Largest `data` of one event, serialized. Well under a socket's 1 MiB write budget,
/// so one event can never be what makes a subscriber too slow.
pub const MAX_DATA_BYTES: usize = 256 * 1024;
/// Most users one publish call may name in its audience.
pub const MAX_AUDIENCE: usize = 100;

/// Why a payload or a channel id was refused: the field's path and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct FieldError {
    /// `type`, `channel_id`, `data`, or `data.questions[0].label`.
    pub field: String,
    pub problem: String,
}

impl FieldError {
    pub fn new(field: impl Into<String>, problem: impl Into<String>) -> Self {
        Self { field: field.into(), problem: problem.into() }
    }
}

/// Checks a channel id: 1 to [`MAX_CHANNEL_ID`] bytes of letters, digits and `_-.:@`.
/// No commas (the `?channels=` list is comma-separated), no braces (they would break a
/// Redis hash tag), nothing a log line or a URL has to escape.
pub fn check_channel_id(id: &str) -> Result<(), FieldError> {
    if id.is_empty() || id.len() > MAX_CHANNEL_ID {
        return Err(FieldError::new("channel_id", format!("a channel id is 1 to {MAX_CHANNEL_ID} bytes")));
    }
    if !id.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-.:@".contains(&b)) {
        return Err(FieldError::new("channel_id", "a channel id is letters, digits and `_-.:@`"));
    }
    Ok(())
}

/// Whether a channel id is in the namespace of Spool's own sessions, which no publisher
/// may speak in: `ses` then a separator (`_-.:@`), in any case, or `ses` alone. Broader
/// than a valid session id on purpose: a look-alike (`SES_…`, `ses_…x`) reaches a client
/// that compares ids loosely as well as the real one would.
pub fn is_session_namespace(id: &str) -> bool {
    let bytes = id.as_bytes();
    bytes.get(..3).is_some_and(|p| p.eq_ignore_ascii_case(b"ses")) && bytes.get(3).is_none_or(|b| b"_-.:@".contains(b))
}

/// Refuses a channel a publisher names (`field`) in Spool's sessions' namespace.
fn not_a_session(field: &str, id: &str) -> Result<(), FieldError> {
    if is_session_namespace(id) {
        return Err(FieldError::new(
            field,
            "a Spool session's channel carries only its own events, and channel ids that begin with `ses` and a \
             separator (any case) are reserved for sessions; publish on a channel of your own",
        ));
    }
    Ok(())
}

/// An object with no fields: `channel.deleted` carries no data (`null` or absent).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Empty {}

macro_rules! hub_events {
    ($( $(#[$doc:meta])* $variant:ident = $name:literal, $scope:ident, $data:ty; )*) => {
        /// Every event type of seed 002, by wire name. Its schema is written out below:
        /// the derived one named the variants, not the wire names.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum HubEventType {
            $( $(#[$doc])* #[serde(rename = $name)] $variant, )*
        }

        /// An event's payload, typed by its event type (the `data` of the envelope).
        #[derive(Clone, Debug, PartialEq, Serialize, ToSchema)]
        #[serde(untagged)]
        pub enum HubPayload {
            $( $(#[$doc])* $variant($data), )*
        }

        impl HubEventType {
            /// Every type, in the seed's order.
            pub const ALL: &'static [HubEventType] = &[$( HubEventType::$variant, )*];

            /// The wire name (`message.created`).
            pub fn name(self) -> &'static str {
                match self { $( HubEventType::$variant => $name, )* }
            }

            /// Whether the type is a channel's or goes to everyone.
            pub fn scope(self) -> Scope {
                match self { $( HubEventType::$variant => Scope::$scope, )* }
            }

            /// The type of a wire name.
            pub fn from_name(name: &str) -> Option<HubEventType> {
                match name { $( $name => Some(HubEventType::$variant), )* _ => None }
            }

            /// Reads `data` as this type's payload; the error names the field.
            pub fn parse(self, data: Value) -> Result<HubPayload, FieldError> {
                match self {
                    $( HubEventType::$variant => typed::<$data>(data).map(HubPayload::$variant), )*
                }
            }
        }

        impl HubPayload {
            pub fn kind(&self) -> HubEventType {
                match self { $( HubPayload::$variant(_) => HubEventType::$variant, )* }
            }
        }
    };
}

impl utoipa::PartialSchema for HubEventType {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{ObjectBuilder, Type};
        ObjectBuilder::new()
            .schema_type(Type::String)
            .description(Some("A hub event type, by its wire name (`message.created`)."))
            .enum_values(Some(HubEventType::ALL.iter().map(|t| t.name())))
            .into()
    }
}

impl ToSchema for HubEventType {}

/// Deserializes `data` into `T`, naming the path of the first field that does not fit.
fn typed<T: serde::de::DeserializeOwned>(data: Value) -> Result<T, FieldError> {
    serde_path_to_error::deserialize(data).map_err(|e| {
        let path = e.path().to_string();
        let field = if path == "." { "data".to_owned() } else { format!("data.{path}") };
        FieldError::new(field, e.into_inner().to_string())
    })
}

hub_events! {
    /// A message was posted to a channel.
    MessageCreated = "message.created", Channel, MessageCreated;
    /// A bot response so far, while it streams.
    MessageStreaming = "message.streaming", Channel, MessageStreaming;
    /// A queued user message was removed.
    MessageDeleted = "message.deleted", Channel, MessageId;
    /// An agent run's lifecycle: running, completed, errored, cancelled.
    AgentStatus = "agent.status", Channel, AgentStatus;
    /// The agent invokes a tool.
    ToolUse = "tool.use", Channel, ToolUse;
    /// An extended-thinking block.
    AgentThinking = "agent.thinking", Channel, AgentThinking;
    /// A tool call finished (pairs with `tool.use` by `tool_use_id`).
    ToolResult = "tool.result", Channel, ToolResult;
    /// An activity indicator (model detection, subagent progress).
    AgentActivity = "agent.activity", Channel, AgentActivity;
    /// The agent asks the person structured questions.
    AgentAskUser = "agent.ask_user", Channel, AskUser;
    /// A plan is ready for review.
    AgentExitPlan = "agent.exit_plan", Channel, ExitPlan;
    /// The agent's todo list changed (the seed's `BroadcastTodoWrite`).
    AgentTodoWrite = "agent.todo_write", Channel, TodoWrite;
    /// Queued messages were taken for processing (the seed's `BroadcastMessagesProcessed`).
    MessagesProcessed = "messages.processed", Channel, MessagesProcessed;
    /// A channel or thread was created (sent to its parent channel).
    ChannelCreated = "channel.created", Channel, ChannelRef;
    /// The channel was deleted; no data.
    ChannelDeleted = "channel.deleted", Channel, Option<Empty>;
    /// A channel's git state changed (global, as in the seed).
    ChannelUpdated = "channel.updated", Global, ChannelUpdated;
    /// An agent instance joined a channel (the seed's `BroadcastAgentInstanceRegistered`).
    AgentInstanceRegistered = "agent_instance.registered", Channel, AgentInstance;
    /// An agent instance left a channel.
    AgentInstanceUnregistered = "agent_instance.unregistered", Channel, AgentInstance;
    /// An agent instance's metadata changed.
    AgentInstanceMetadata = "agent_instance.metadata", Channel, AgentInstance;
    /// An image build progressed (the seed's `BroadcastImageBuildStatus`).
    ImageBuildStatus = "image.build_status", Global, ImageBuildStatus;
    /// A newer image is available (the seed's `BroadcastImageUpdateAvailable`).
    ImageUpdateAvailable = "image.update_available", Global, ImageUpdateAvailable;
    /// A workflow run began.
    WorkflowRunStarted = "workflow.run_started", Global, WorkflowRun;
    /// A workflow run reached a terminal state.
    WorkflowRunCompleted = "workflow.run_completed", Global, WorkflowRun;
    /// An approval node paused a workflow run.
    WorkflowRunPaused = "workflow.run_paused", Global, WorkflowRun;
    /// A workflow node began.
    WorkflowNodeStarted = "workflow.node_started", Global, WorkflowNode;
    /// A workflow node finished.
    WorkflowNodeCompleted = "workflow.node_completed", Global, WorkflowNode;
    /// A gate waits for a human decision.
    GateApprovalRequested = "gate.approval_requested", Channel, GateApprovalRequested;
    /// A gate approval was resolved.
    GateApprovalResolved = "gate.approval_resolved", Channel, GateApprovalResolved;
    /// A container was added to the registry.
    ContainerRegistered = "container.registered", Global, Container;
    /// A container's lifecycle status changed.
    ContainerStatusChanged = "container.status_changed", Global, Container;
    /// A container was removed from the registry.
    ContainerRemoved = "container.removed", Global, Container;
    /// A ticket was created.
    TicketCreated = "ticket.created", Global, TicketRef;
    /// A ticket was updated.
    TicketUpdated = "ticket.updated", Global, TicketRef;
    /// A ticket was deleted.
    TicketDeleted = "ticket.deleted", Global, TicketRef;
    /// A named playground was updated.
    PlaygroundUpdate = "playground.update", Global, PlaygroundUpdate;
    /// A quality scan began.
    QualitySessionStarted = "quality.session_started", Channel, QualitySessionStarted;
    /// A quality scan completed: the whole report.
    QualityScanned = "quality.scanned", Channel, QualityScanReport;
    /// At least one quality rule failed.
    QualityRulesViolated = "quality.rules_violated", Channel, QualityRulesReport;
    /// A quality scan ended, whatever its outcome.
    QualitySessionEnded = "quality.session_ended", Channel, QualitySessionEnded;
    /// Reserved by the seed: a scan's progress.
    QualityScanProgress = "quality.scan_progress", Channel, QualityScanProgress;
    /// Reserved by the seed: a scan was cancelled.
    QualityScanCancelled = "quality.scan_cancelled", Channel, QualityScanCancelled;
    /// A review comment.
    ReviewComment = "review.comment", Channel, ReviewComment;
    /// A review session's status changed.
    ReviewStatus = "review.status", Channel, ReviewStatus;
}

impl fmt::Display for HubEventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One event as a publisher hands it in: its type, its channel (`None` or ignored for
/// global types) and its typed payload.
#[derive(Clone, Debug, PartialEq)]
pub struct HubEvent {
    pub channel_id: String,
    pub payload: HubPayload,
}

impl HubEvent {
    /// Checks and places an event: a global type's channel is [`GLOBAL_CHANNEL`]
    /// whatever was given; a channel type needs a valid channel id. The data's size is
    /// checked here too, so every way in has the same limits.
    pub fn new(channel_id: Option<&str>, payload: HubPayload) -> Result<Self, FieldError> {
        let channel_id = match payload.kind().scope() {
            Scope::Global => GLOBAL_CHANNEL.to_owned(),
            Scope::Channel => {
                let id = channel_id.ok_or_else(|| {
                    FieldError::new("channel_id", format!("`{}` is a channel event: name its channel", payload.kind()))
                })?;
                check_channel_id(id)?;
                not_a_session("channel_id", id)?;
                id.to_owned()
            }
        };
        // A channel named inside the data is what a client applies the event to (a
        // global `channel.updated` is a channel's git state): the same rules hold.
        if let HubPayload::ChannelUpdated(ChannelUpdated { channel_id: named, .. })
        | HubPayload::ChannelCreated(ChannelRef { channel_id: named, .. }) = &payload
        {
            check_channel_id(named).map_err(|e| FieldError::new("data.channel_id", e.problem))?;
            not_a_session("data.channel_id", named)?;
        }
        let size = serde_json::to_vec(&payload).map(|v| v.len()).unwrap_or(usize::MAX);
        if size > MAX_DATA_BYTES {
            return Err(FieldError::new("data", format!("at most {MAX_DATA_BYTES} bytes of JSON (this is {size})")));
        }
        Ok(Self { channel_id, payload })
    }

    /// Reads one event's parts as the publish API receives them.
    pub fn parse(kind: &str, channel_id: Option<&str>, data: Value) -> Result<Self, FieldError> {
        let kind = HubEventType::from_name(kind)
            .ok_or_else(|| FieldError::new("type", format!("`{}` is not a hub event type", clip(kind))))?;
        let payload = kind.parse(data)?;
        Self::new(channel_id, payload)
    }
}

fn clip(text: &str) -> String {
    text.chars().take(64).collect()
}

/// A published event on the wire: the seed's envelope plus the `cursor` to resume from.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PublishedEnvelope<'a> {
    #[serde(rename = "type")]
    pub kind: HubEventType,
    pub channel_id: &'a str,
    pub data: &'a HubPayload,
    pub timestamp: Millis,
    pub cursor: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_type_has_one_name_and_parses_its_seed_example() {
        let mut names: Vec<&str> = HubEventType::ALL.iter().map(|t| t.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), HubEventType::ALL.len());
        for kind in HubEventType::ALL {
            assert_eq!(HubEventType::from_name(kind.name()), Some(*kind));
        }
        let ask = json!({"questions": [{"question": "Where?", "header": "Location",
            "options": [{"label": "Root", "description": "the root"}], "multi_select": false}]});
        let parsed = HubEventType::AgentAskUser.parse(ask.clone()).expect("seed example");
        assert_eq!(serde_json::to_value(&parsed).expect("serialize"), ask);
    }

    #[test]
    fn errors_name_the_field() {
        let bad = json!({"questions": [{"question": "Where?", "options": [{"description": "no label"}]}]});
        let err = HubEventType::AgentAskUser.parse(bad).expect_err("label missing");
        assert_eq!(err.field, "data.questions[0].options[0]");
        assert!(err.problem.contains("label"), "{err}");
        let err = HubEventType::TicketCreated.parse(json!({"ticket_id": 5})).expect_err("wrong type");
        assert_eq!(err.field, "data.ticket_id");
        let err = HubEventType::TicketCreated.parse(json!({"ticket_id": "t", "x": 1})).expect_err("unknown field");
        assert!(err.problem.contains("unknown field `x`"), "{err}");
        let err = HubEvent::parse("nope", None, json!({})).expect_err("unknown type");
        assert_eq!(err.field, "type");
    }

    #[test]
    fn global_types_ignore_the_channel_and_channel_types_need_one() {
        let ticket = HubEvent::parse("ticket.created", Some("chan_a"), json!({"ticket_id": "t1"})).expect("valid");
        assert_eq!(ticket.channel_id, GLOBAL_CHANNEL);
        let err = HubEvent::parse("review.status", None, json!({"status": "ready"})).expect_err("no channel");
        assert_eq!(err.field, "channel_id");
        for bad in ["", "a,b", "{x}", "with space", &"x".repeat(MAX_CHANNEL_ID + 1)] {
            assert!(check_channel_id(bad).is_err(), "{bad:?}");
        }
        let deleted = HubEvent::parse("channel.deleted", Some("chan_a"), Value::Null).expect("no data");
        assert_eq!(serde_json::to_value(&deleted.payload).expect("serialize"), Value::Null);
    }

    #[test]
    fn no_publisher_speaks_in_a_sessions_namespace_however_spelled() {
        let session = "ses_01hzy3k8v0q9w7x5c2b4n6m8p0";
        for id in
            [session, "SES_01HZY3K8V0Q9W7X5C2B4N6M8P0", "ses_01hzy3k8v0q9w7x5c2b4n6m8p0x", "Ses-1", "ses", "sES:a"]
        {
            assert!(is_session_namespace(id), "{id}");
            let err = HubEvent::parse("review.status", Some(id), json!({"status": "ready"})).expect_err(id);
            assert_eq!(err.field, "channel_id", "{id}");
            let err = HubEvent::parse("channel.updated", None, json!({"channel_id": id, "branch": "x"})).expect_err(id);
            assert_eq!(err.field, "data.channel_id", "{id}");
            let err = HubEvent::parse("channel.created", Some("chan_a"), json!({"channel_id": id})).expect_err(id);
            assert_eq!(err.field, "data.channel_id", "{id}");
        }
        for id in ["session_notes", "sesame", "chan_ses_1", "s_es"] {
            assert!(!is_session_namespace(id), "{id}");
        }
        let ok = HubEvent::parse("channel.updated", None, json!({"channel_id": "chan_a", "branch": "main"}));
        assert!(ok.is_ok(), "{ok:?}");
        let err = HubEvent::parse("channel.updated", None, json!({"channel_id": " ses_x"})).expect_err("space");
        assert_eq!(err.field, "data.channel_id");
    }

    #[test]
    fn data_is_bounded() {
        let big = "x".repeat(MAX_DATA_BYTES);
        let err = HubEvent::parse("agent.thinking", Some("c"), json!({"text": big})).expect_err("too big");
        assert_eq!(err.field, "data");
    }
}
