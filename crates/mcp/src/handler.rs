//! What Spool answers when a server asks it something, and what it does with the
//! server's notifications. For now it declines elicitation and refuses sampling
//! (rmcp's defaults; the live ask comes with WP4), and it notes `tools/list_changed`
//! so the next turn lists the server's tools again.

use rmcp::ClientHandler;
use rmcp::service::{NotificationContext, RoleClient};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// A connection's handler: it only remembers that the tool list changed.
#[derive(Clone, Debug, Default)]
pub(crate) struct Handler {
    stale: Arc<AtomicBool>,
}

impl Handler {
    /// Whether the server said its tools changed since the last call; clears it.
    pub(crate) fn take_stale(&self) -> bool {
        self.stale.swap(false, Ordering::SeqCst)
    }
}

impl ClientHandler for Handler {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.stale.store(true, Ordering::SeqCst);
    }
}
