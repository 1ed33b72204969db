//! Forking a session: a new session in the same project that starts with the source's
//! first `k` committed messages (same indices, new ids) and carries on on its own.
//!
//! Only committed messages are copied, so a fork may be taken while the source runs: a
//! draft still streaming stays behind. `k` must end a turn (the end of the history, or
//! just before a user message), because a fork that stopped between a tool call and its
//! result would hand the model a call without an answer on its next prompt.

use super::*;

impl Sessions<'_> {
    /// Forks `id` before message `before` (default: after every committed message, or
    /// before a running turn whose tool calls are still unanswered) into
    /// a new session titled `title` (default: the source's title with " (fork)").
    /// Copies the model, mode and the session's own permission rules; the memory's
    /// facts always, its summary only when it covers messages the fork keeps
    /// (`summarized_before <= k`), since a summary of messages the fork dropped would
    /// tell the model about turns it never had. The per-user session cap applies.
    pub async fn fork(
        &self,
        owner: &UserId,
        id: &SessionId,
        before: Option<u64>,
        title: Option<String>,
    ) -> Result<Session> {
        let source = self.engine.owned_session(owner, id).await?;
        let store = self.engine.store();
        let total = store.count_messages(&source.id).await?;
        let k = match before {
            Some(k) => k,
            None => self.settled_end(&source.id, total).await?,
        };
        if k > total {
            return Err(EngineError::invalid(
                "invalid_index",
                format!("beforeIndex {k} is past the session's end ({total} messages)"),
            ));
        }
        if k < total {
            let at = store.list_messages(&source.id, Some(k + 1), 1).await?;
            if !at.first().is_some_and(|m| m.index == k && matches!(m.message, Message::User { .. })) {
                return Err(EngineError::invalid(
                    "invalid_index",
                    format!("beforeIndex {k} is not a user message: a fork ends where a turn begins"),
                ));
            }
        }
        let title = match title {
            Some(title) => check_name(&title, "title")?,
            None => default_title(&source.title),
        };
        self.engine.admit_session(owner).await?;
        let now = now_ms();
        let session = Session {
            id: SessionId::new(),
            project_id: source.project_id.clone(),
            owner_id: owner.clone(),
            title,
            title_set: true,
            archived: false,
            permissions: source.permissions.clone(),
            model: source.model.clone(),
            mode: source.mode,
            read_index: None,
            created_at: now,
            updated_at: now,
        };
        store.insert_session(&session).await?;
        if let Err(e) = self.copy_history(&source, &session, k).await {
            // The copy is one transaction, so only the empty session is left to undo.
            let _ = store.delete_session(&session.id).await;
            return Err(e);
        }
        self.engine.inner.lists.change(
            owner,
            crate::lists::Change::SessionCreated { session: session.id.clone(), project: session.project_id.clone() },
        );
        Ok(session)
    }

    /// Where "every committed message" ends for a fork: the end of the history, unless
    /// the last turn is still running and its latest tool calls have no results yet;
    /// then the start of that turn, so the fork never holds an unanswered call.
    async fn settled_end(&self, id: &SessionId, total: u64) -> Result<u64> {
        let round = self.engine.store().latest_rounds(id, 1).await?;
        let last_step = round.iter().enumerate().rev().find_map(|(at, m)| match &m.message {
            Message::Assistant { content, .. } => Some((at, content)),
            _ => None,
        });
        let Some((last_step, content)) = last_step else {
            return Ok(total);
        };
        let answered: HashSet<&str> = round[last_step..]
            .iter()
            .filter_map(|m| match &m.message {
                Message::ToolResult { tool_call_id, .. } => Some(tool_call_id.as_str()),
                _ => None,
            })
            .collect();
        let unanswered =
            content.iter().any(|c| matches!(c, Content::ToolCall { id, .. } if !answered.contains(id.as_str())));
        Ok(match unanswered {
            true => round.first().map_or(total, |m| m.index),
            false => total,
        })
    }

    async fn copy_history(&self, source: &Session, fork: &Session, k: u64) -> Result<()> {
        let store = self.engine.store();
        store.copy_messages(&source.id, &fork.id, &fork.owner_id, k).await?;
        // The copied messages' files are the fork's too, so deleting the source keeps them.
        let copied = store.list_messages(&fork.id, None, u32::try_from(k).unwrap_or(u32::MAX)).await?;
        self.engine.attachments().hold_for(&fork.owner_id, &fork.id, &copied).await?;
        let mut memory = store.get_memory(&source.id).await?;
        if memory.summarized_before > k {
            memory.summary = None;
            memory.summarized_before = 0;
        }
        if memory != SessionMemory::default() {
            store.put_memory(&fork.id, &fork.owner_id, &memory).await?;
        }
        Ok(())
    }
}

/// "<title> (fork)", cut so it still fits a title; an untitled source gives "Fork".
fn default_title(source: &str) -> String {
    const SUFFIX: &str = " (fork)";
    let source = source.trim();
    if source.is_empty() {
        return "Fork".to_owned();
    }
    let room = MAX_NAME - SUFFIX.chars().count();
    let kept: String = source.chars().take(room).collect();
    format!("{}{SUFFIX}", kept.trim_end())
}
