//! Who is on a session right now, across every node: how many views follow it, how many
//! of them can answer its approvals, how many of those a person is looking at, and
//! which kinds of client they are. A session has one owner, so "who" is that owner's
//! clients; the counts say where a waiting approval can be seen and answered.
//!
//! Announced as the `session.presence` frame when the counts change and folded into
//! [`SessionState::presence`](crate::frame::SessionState::presence), so a snapshot
//! carries the latest; `GET /api/sessions/{id}/presence` reads it fresh.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use utoipa::ToSchema;

/// Which kind of client holds a view of a session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ClientKind {
    /// The web UI (its `/api/streams` socket).
    Web,
    /// `spool chat` and other terminal clients of the native stream.
    Cli,
    /// A hub client (`/api/hub`).
    Hub,
    /// An AG-UI run stream.
    AgUi,
    /// An AI SDK UI message stream.
    AiSdk,
    /// An OpenCode client.
    Opencode,
    /// Anything else (a plain `GET /api/sessions/{id}/events`, the run stream).
    Other,
}

impl ClientKind {
    /// Every kind, in the order counts are kept and written.
    pub const ALL: [ClientKind; 7] = [
        ClientKind::Web,
        ClientKind::Cli,
        ClientKind::Hub,
        ClientKind::AgUi,
        ClientKind::AiSdk,
        ClientKind::Opencode,
        ClientKind::Other,
    ];

    /// The kind's wire name (`ag-ui`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            ClientKind::Web => "web",
            ClientKind::Cli => "cli",
            ClientKind::Hub => "hub",
            ClientKind::AgUi => "ag-ui",
            ClientKind::AiSdk => "ai-sdk",
            ClientKind::Opencode => "opencode",
            ClientKind::Other => "other",
        }
    }

    /// The kind a wire name names, if any.
    pub fn parse(name: &str) -> Option<ClientKind> {
        ClientKind::ALL.into_iter().find(|k| k.as_str() == name)
    }

    /// Where the kind's count sits in [`ClientKind::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

/// The views of one session, summed over every node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Presence {
    /// Open streams of the session (every dialect).
    pub viewers: u64,
    /// Of those, views where a person can answer an approval (the web UI, `?approvals=1`,
    /// hub, AG-UI, AI SDK and OpenCode streams).
    pub answerers: u64,
    /// Of the answerers, those whose page is visible now (the web UI says when its tab
    /// is hidden; other answerers count as visible).
    pub visible: u64,
    /// Viewers by kind of client (kinds with none are left out).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub clients: BTreeMap<ClientKind, u64>,
}

impl Presence {
    /// Nobody is there.
    pub fn is_empty(&self) -> bool {
        *self == Presence::default()
    }
}
