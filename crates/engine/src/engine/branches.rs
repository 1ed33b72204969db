//! Branches of a session (issue 39): an edited or regenerated prompt takes the place of
//! the turns from its message on, which are shelved as a numbered branch
//! ([`crate::store::Branches`]); switching brings a branch back and shelves the turns it
//! replaces. The active path stays what the messages table holds, so a run's context,
//! every dialect and every history route see it and nothing else.
//!
//! Everything that moves turns happens under the session's control lock with the
//! session quiet (no run going or parked, nothing queued, no other node running it),
//! then the view is read again from the store and sent as a state frame, so every open
//! view redraws the path it now shows. The edit itself lives with the prompt
//! ([`Runs::submit`](super::Runs::submit) with `at`), which shelves and starts the run in
//! one step; this room holds the rest and the helpers both use.

use super::*;

impl Sessions<'_> {
    /// Switches the session to its branch `ordinal`: that version's turns come back on
    /// the active path and the turns they replace are shelved (kind `switch`). Answers
    /// the session's new state, which every open view has been sent too.
    /// `session_busy` while a run is going or parked or prompts are queued.
    pub async fn switch_branch(&self, owner: &UserId, id: &SessionId, ordinal: u32) -> Result<SessionState> {
        let loaded = self.engine.load(owner, id).await?;
        let _control = loaded.control.lock().await;
        let _lease = self.engine.quiet_session(&loaded, id).await?;
        if self.engine.store().branch_messages(id, ordinal).await?.is_none() {
            return Err(EngineError::NotFound("branch"));
        }
        let switched = self.engine.store().unshelve(id, ordinal).await?;
        tracing::info!(session = %id, ordinal, shelved = ?switched, "switched branch");
        self.engine.republish_stored(&loaded, id).await?;
        Ok(loaded.events.state().1)
    }

    /// The session's shelved branches, oldest first.
    pub async fn branches(&self, owner: &UserId, id: &SessionId) -> Result<Vec<Branch>> {
        self.engine.owned_session(owner, id).await?;
        Ok(self.engine.store().list_branches(id).await?)
    }

    /// A page of the session's branch `ordinal`, as [`messages`](Self::messages) pages
    /// the active path: the latest `limit` messages with an index below `before`, oldest
    /// first; `total` is how many the branch holds.
    pub async fn branch_messages(
        &self,
        owner: &UserId,
        id: &SessionId,
        ordinal: u32,
        before: Option<u64>,
        limit: Option<u32>,
    ) -> Result<MessagePage> {
        // The same page rule as the active path's history.
        let limit = super::sessions::page_limit(limit)?;
        self.engine.owned_session(owner, id).await?;
        let all = self.engine.store().branch_messages(id, ordinal).await?.ok_or(EngineError::NotFound("branch"))?;
        let total = all.len() as u64;
        let below: Vec<IndexedMessage> = all.into_iter().filter(|m| before.is_none_or(|b| m.index < b)).collect();
        let skip = below.len().saturating_sub(limit as usize);
        Ok(MessagePage { messages: below.into_iter().skip(skip).collect(), total })
    }
}

impl Engine {
    /// Refuses while the session is not quiet: a run going or parked here, prompts
    /// queued, or a run on another node (its lease, held until the caller drops it, so
    /// none starts meanwhile). Called under the session's control lock.
    pub(crate) async fn quiet_session(&self, loaded: &Loaded, id: &SessionId) -> Result<LeaseGuard> {
        if let Some(active) = loaded.active()
            && (active.interrupted.is_some() || !self.settles_now(&active).await?)
        {
            return Err(EngineError::SessionBusy(active.run_id.to_string()));
        }
        if !self.store().queued_prompts(id).await?.is_empty() {
            return Err(EngineError::SessionBusy("prompts are queued".into()));
        }
        LeaseGuard::take(&self.inner.leases, id).await
    }

    /// The user message at `index` on the session's path; `invalid_index` when the
    /// message there is not a user's (or there is none).
    pub(crate) async fn user_message_at(&self, id: &SessionId, index: u64) -> Result<IndexedMessage> {
        let at = self.store().list_messages(id, Some(index.saturating_add(1)), 1).await?;
        match at.into_iter().next() {
            Some(m) if m.index == index && m.message.is_user() => Ok(m),
            _ => Err(EngineError::invalid(
                "invalid_index",
                format!("index {index} is not a user message of the session's active path"),
            )),
        }
    }

    /// Reads the loaded session's view from the store again (its messages changed under
    /// it) and sends it to every open view as a state frame.
    pub(crate) async fn republish_stored(&self, loaded: &Loaded, id: &SessionId) -> Result<()> {
        let session = self.store().get_session(id).await?.ok_or(EngineError::NotFound("session"))?;
        let fresh = self.stored_view(session).await?;
        loaded.events.publish(move |state| {
            *state = fresh;
            Some(FrameBody::State { state: Box::new(state.clone()) })
        });
        Ok(())
    }
}
