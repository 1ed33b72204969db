//! Two approval queries the OpenCode-compatible dialect needs and the native API does
//! not: OpenCode lists pending permissions across sessions (`GET /permission`) and
//! answers one by its id alone (`POST /permission/:id/reply`), while Spool's own routes
//! always name the session. Both check ownership like every other engine method: another
//! user's approval is `NotFound`.

use crate::engine::Engine;
use crate::error::{EngineError, Result};
use spool_protocol::{Approval, ApprovalId, ApprovalStatus, UserId};

impl Engine {
    /// Every approval of `owner` still waiting for a decision, oldest first.
    pub async fn pending_approvals_of(&self, owner: &UserId) -> Result<Vec<Approval>> {
        let mut pending = self.inner.store.all_pending_approvals().await?;
        pending.retain(|a| &a.owner_id == owner && a.status == ApprovalStatus::Pending);
        pending.sort_by(|a, b| a.created_at.cmp(&b.created_at).then_with(|| a.id.cmp(&b.id)));
        Ok(pending)
    }

    /// One approval of `owner`, in whatever state it is.
    pub async fn approval(&self, owner: &UserId, id: &ApprovalId) -> Result<Approval> {
        match self.inner.store.get_approval(id).await? {
            Some((approval, _)) if &approval.owner_id == owner => Ok(approval),
            _ => Err(EngineError::NotFound("approval")),
        }
    }
}
