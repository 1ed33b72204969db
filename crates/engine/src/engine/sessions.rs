//! The engine's sessions: created (by name too, exactly once), listed, changed and
//! deleted, their messages, memory and permissions, and how one is loaded into memory
//! (`load`: the stored view, a parked run's count).

use super::*;
use crate::events::Viewer;

/// `engine.sessions()`: a user's sessions, what they hold and their native streams.
#[derive(Clone, Copy)]
pub struct Sessions<'a> {
    pub(crate) engine: &'a Engine,
}

impl Sessions<'_> {
    pub async fn create(&self, owner: &UserId, project_id: &ProjectId, title: Option<String>) -> Result<Session> {
        let project = self.engine.projects().get(owner, project_id).await?;
        let title = title.map(|t| check_name(&t, "title")).transpose()?;
        self.engine.admit_session(owner).await?;
        let now = now_ms();
        let session = Session {
            id: SessionId::new(),
            project_id: project.id,
            owner_id: owner.clone(),
            title_set: title.is_some(),
            title: title.unwrap_or_default(),
            archived: false,
            permissions: Vec::new(),
            model: None,
            mode: Default::default(),
            read_index: None,
            created_at: now,
            updated_at: now,
        };
        self.engine.store().insert_session(&session).await?;
        self.engine.inner.lists.change(
            &session.owner_id,
            crate::lists::Change::SessionCreated { session: session.id.clone(), project: session.project_id.clone() },
        );
        Ok(session)
    }

    /// The session a client named `name` (an AI SDK chat id) before, if any (see
    /// [`named_or_create`](Self::named_or_create)).
    pub async fn named(&self, owner: &UserId, name: &str) -> Result<Option<SessionId>> {
        use crate::store::IdempotencyClaim;
        let scope = name_scope(owner);
        match self.engine.store().claim_idempotency(&scope, name, now_ms()).await? {
            IdempotencyClaim::Done(answer) => Ok(Some(named(name, answer)?)),
            IdempotencyClaim::InProgress => Err(name_in_progress(name)),
            IdempotencyClaim::Claimed => {
                self.engine.store().release_idempotency(&scope, name).await?;
                Ok(None)
            }
        }
    }

    /// The session a client names with a key of its own (an AI SDK chat id): the one
    /// that key named before, or — on first use — a new session in `project`,
    /// remembered for the key. The pair is kept durably, once, in the store's
    /// idempotency records (scope `session-name:<owner>`), so concurrent first uses
    /// agree on one session; a use that races one still creating gets a 409
    /// `name_in_progress` to retry. Returns the session and whether this call made it.
    pub async fn named_or_create(&self, owner: &UserId, name: &str, project: &ProjectId) -> Result<(SessionId, bool)> {
        use crate::store::IdempotencyClaim;
        let scope = name_scope(owner);
        match self.engine.store().claim_idempotency(&scope, name, now_ms()).await? {
            IdempotencyClaim::Done(answer) => Ok((named(name, answer)?, false)),
            IdempotencyClaim::InProgress => Err(name_in_progress(name)),
            IdempotencyClaim::Claimed => match self.create(owner, project, None).await {
                Ok(session) => {
                    self.engine.store().complete_idempotency(&scope, name, session.id.as_str()).await?;
                    Ok((session.id, true))
                }
                Err(e) => {
                    self.engine.store().release_idempotency(&scope, name).await?;
                    Err(e)
                }
            },
        }
    }

    pub async fn list(&self, owner: &UserId, project_id: &ProjectId, archived: bool) -> Result<Vec<SessionInfo>> {
        let project = self.engine.projects().get(owner, project_id).await?;
        let sessions = self.engine.store().list_sessions(&project.id, archived).await?;
        let waiting = self.engine.waiting_among(&sessions).await?;
        Ok(sessions.into_iter().map(|session| self.engine.session_info(session, &waiting)).collect())
    }

    /// The project's sessions with a run that ended after `after` (ms), latest first, at
    /// most `limit`: what a client that was away since then has not seen end.
    pub async fn ended_after(
        &self,
        owner: &UserId,
        project_id: &ProjectId,
        after: spool_protocol::time::Millis,
        limit: u32,
    ) -> Result<Vec<SessionId>> {
        let project = self.engine.projects().get(owner, project_id).await?;
        Ok(self.engine.store().sessions_ended_after(&project.id, after, limit).await?)
    }

    pub async fn get(&self, owner: &UserId, id: &SessionId) -> Result<SessionDetail> {
        let loaded = self.engine.load(owner, id).await?;
        // Bus mode: what this node changed shows in what it answers.
        let (seq, state) = loaded.events.settled_state(READ_YOUR_WRITES).await;
        let stream_id = loaded.events.stream_id();
        Ok(SessionDetail {
            session: state.session.clone(),
            status: state.status,
            git: self.engine.inner.git.get(id, &stream_id),
            stream_id,
            seq,
            state,
        })
    }

    pub async fn update(&self, owner: &UserId, id: &SessionId, patch: SessionPatch) -> Result<Session> {
        let loaded = self.engine.load(owner, id).await?;
        let _record = loaded.record.lock().await;
        let mut session = loaded.events.read(|s| s.session.clone());
        // Checked before anything is written: a refused patch changes nothing.
        let ceiling = &self.engine.inner.config.guardrails;
        if let Some(why) = patch.guardrails.as_ref().and_then(|g| g.loosening(ceiling)) {
            return Err(EngineError::invalid("guardrails_loosened", why));
        }
        if let Some(title) = patch.title {
            session.title = check_name(&title, "title")?;
            session.title_set = true;
        }
        if let Some(archived) = patch.archived {
            // Taking a session out of the archive counts against the cap like a new one.
            if session.archived && !archived {
                let caps = &self.engine.inner.config.caps;
                if self.engine.store().count_sessions(owner, false).await? >= caps.max_sessions as u64 {
                    return Err(crate::caps::sessions_full(caps));
                }
            }
            session.archived = archived;
        }
        if let Some(mode) = patch.mode {
            session.mode = mode;
        }
        if let Some(model) = patch.model {
            if self.engine.inner.env.models.get(&model).is_none() {
                let known: Vec<String> = self.engine.inner.env.models.list().into_iter().map(|m| m.name).collect();
                return Err(EngineError::invalid(
                    "unknown_model",
                    format!("no model named {model:?} is configured; configured: {}", known.join(", ")),
                ));
            }
            session.model = Some(model);
        }
        if let Some(rules) = patch.permissions {
            if rules.len() > MAX_SESSION_RULES
                || rules.iter().any(|r| r.tool.is_empty() || r.tool.len() > 200 || r.pattern.len() > 1000)
            {
                return Err(EngineError::invalid(
                    "invalid_permissions",
                    format!(
                        "at most {MAX_SESSION_RULES} rules, each with a tool name of 1 to 200 bytes and a pattern of at most 1000"
                    ),
                ));
            }
            session.permissions = rules;
        }
        session.updated_at = now_ms();
        if let Some(guardrails) = patch.guardrails {
            let own = (!guardrails.is_empty()).then_some(&guardrails);
            self.engine.store().set_session_guardrails(&session.id, own, session.updated_at).await?;
        }
        self.engine.store().update_session(&session).await?;
        loaded.publish_session(session.clone());
        Ok(session)
    }

    /// Deletes a session with its messages and runs; an active run is aborted first and
    /// open streams end.
    pub async fn delete(&self, owner: &UserId, id: &SessionId) -> Result<()> {
        let loaded = self.engine.load(owner, id).await?;
        let project = loaded.events.read(|s| s.session.project_id.clone());
        // Under the control lock, so the stopped run's queue cannot start its next prompt
        // before the delete takes the queue with the session.
        let control = loaded.control.lock().await;
        stop_active(&loaded).await;
        // The files its rows name: their blobs go too once no other row names them.
        let shas = self.engine.store().session_attachment_shas(id).await?;
        // Delete first, then unload: a stream opened meanwhile finds the session gone
        // instead of loading it back into memory.
        let deleted = self.engine.store().delete_session(id).await;
        drop(control);
        self.engine.unload(id, &loaded).await;
        self.engine.inner.lists.change(owner, crate::lists::Change::SessionDeleted { session: id.clone(), project });
        deleted?;
        self.engine.attachments().release(shas).await;
        Ok(())
    }

    pub async fn messages(
        &self,
        owner: &UserId,
        id: &SessionId,
        before: Option<u64>,
        limit: Option<u32>,
    ) -> Result<MessagePage> {
        let limit = page_limit(limit)?;
        let session = self.engine.owned_session(owner, id).await?;
        let messages = self.engine.store().list_messages(&session.id, before, limit).await?;
        let total = self.engine.store().count_messages(&session.id).await?;
        Ok(MessagePage { messages, total })
    }

    /// The snapshots of the session's steps (issue 39), in conversation order.
    pub async fn step_snapshots(&self, owner: &UserId, id: &SessionId) -> Result<Vec<crate::store::StepSnapshot>> {
        let session = self.engine.owned_session(owner, id).await?;
        Ok(self.engine.store().list_step_snapshots(&session.id).await?)
    }

    /// The session's memory: confirmed facts and the compaction summary.
    pub async fn memory(&self, owner: &UserId, id: &SessionId) -> Result<SessionMemory> {
        let session = self.engine.owned_session(owner, id).await?;
        Ok(self.engine.store().get_memory(&session.id).await?)
    }

    /// The rules that decide a session's tool calls: the server's (built-in defaults, then
    /// the config file; their deny is final) and the session's own ("Always allow" and
    /// `PATCH`), each in the order they are checked.
    pub async fn permissions(
        &self,
        owner: &UserId,
        id: &SessionId,
    ) -> Result<(Vec<PermissionRule>, Vec<PermissionRule>)> {
        let session = self.engine.owned_session(owner, id).await?;
        Ok((self.engine.inner.env.settings.rules.clone(), session.permissions))
    }

    /// Removes the session's rule at `index` (Undo in the Rules panel), which must still
    /// be a rule for `tool` with `action`: a tab showing an older list gets a conflict
    /// instead of removing whatever rule is at that place now. Under the session's
    /// control lock, like the "Always allow" a decision adds, and the store removes it
    /// in one locked step (see
    /// [`store::Sessions::remove_session_rule`](crate::store::Sessions::remove_session_rule)),
    /// so a rule added at the same moment — here or on another node — stays. Returns the rules as
    /// [`Sessions::permissions`] does, the session's as they are now.
    pub async fn remove_permission(
        &self,
        owner: &UserId,
        id: &SessionId,
        index: usize,
        tool: &str,
        action: PermissionAction,
    ) -> Result<(Vec<PermissionRule>, Vec<PermissionRule>)> {
        let loaded = self.engine.load(owner, id).await?;
        let _control = loaded.control.lock().await;
        let now = now_ms();
        let rules = match self.engine.store().remove_session_rule(id, index, tool, action, now).await? {
            crate::RuleRemoval::Removed(rules) => rules,
            crate::RuleRemoval::NoSession => return Err(EngineError::NotFound("session")),
            crate::RuleRemoval::Mismatch(None) => return Err(EngineError::NotFound("permission rule")),
            crate::RuleRemoval::Mismatch(Some(there)) => {
                return Err(EngineError::Conflict {
                    code: "rule_changed",
                    message: format!(
                        "the session's rule {index} is now {:?} {} (not {tool:?} {}): reload the rules and try again",
                        there.tool,
                        action_name(there.action),
                        action_name(action)
                    ),
                });
            }
        };
        let published = rules.clone();
        loaded.events.publish(move |state| {
            state.session.permissions = published;
            state.session.updated_at = now;
            Some(FrameBody::State { state: Box::new(state.clone()) })
        });
        Ok((self.engine.inner.env.settings.rules.clone(), rules))
    }

    /// A person confirms a fact; later model calls see it among the confirmed facts.
    pub async fn confirm_fact(&self, owner: &UserId, id: &SessionId, text: &str) -> Result<SessionMemory> {
        let text = text.trim();
        if text.is_empty()
            || text.chars().count() > crate::context::MAX_FACT_CHARS
            || text.chars().any(char::is_control)
        {
            return Err(EngineError::invalid(
                "invalid_fact",
                format!("a fact is 1 to {} characters on one line", crate::context::MAX_FACT_CHARS),
            ));
        }
        let loaded = self.engine.load(owner, id).await?;
        // Under the control lock so it cannot interleave with a run's own fact writes
        // at a step boundary; a running run picks it up at its next load.
        let _control = loaded.control.lock().await;
        let mut memory = self.engine.store().get_memory(id).await?;
        crate::context::remember(&mut memory, text, FactSource::User, now_ms());
        self.engine.store().put_memory(id, owner, &memory).await?;
        Ok(memory)
    }

    /// Records a durable read receipt: the person has read the session up to `index`.
    /// Receipts only move forward; pages are told so unread markers update.
    pub async fn mark_read(&self, owner: &UserId, id: &SessionId, index: u64) -> Result<Session> {
        let loaded = self.engine.load(owner, id).await?;
        let _record = loaded.record.lock().await;
        let mut session = loaded.events.read(|s| s.session.clone());
        let total = loaded.events.read(|s| s.total);
        if index >= total {
            return Err(EngineError::invalid(
                "invalid_index",
                format!("index {index} is past the session's last message ({total} messages)"),
            ));
        }
        if session.read_index.is_some_and(|r| r >= index) {
            return Ok(session);
        }
        session.read_index = Some(index);
        self.engine.store().update_session(&session).await?;
        loaded.publish_session(session.clone());
        Ok(session)
    }

    /// Subscribes to a session's native stream from an optional cursor (see
    /// [`SessionEvents::subscribe`]).
    pub async fn subscribe(
        &self,
        owner: &UserId,
        id: &SessionId,
        cursor: Option<&Cursor>,
        kill: CancellationToken,
        viewer: Viewer,
    ) -> Result<(Subscription, Start)> {
        self.open_stream(owner, id, cursor, kill, viewer, false).await
    }

    /// Like [`subscribe`](Self::subscribe), replaying a cursor the buffer cannot serve
    /// from the run frame log where that is exact (the native session stream; see
    /// `events::from_log`).
    pub async fn subscribe_logged(
        &self,
        owner: &UserId,
        id: &SessionId,
        cursor: Option<&Cursor>,
        kill: CancellationToken,
        viewer: Viewer,
    ) -> Result<(Subscription, Start)> {
        self.open_stream(owner, id, cursor, kill, viewer, true).await
    }

    /// What both subscriptions do: load the session, take a stream permit, backfill
    /// to the cursor, subscribe (from the log too with `from_log`).
    async fn open_stream(
        &self,
        owner: &UserId,
        id: &SessionId,
        cursor: Option<&Cursor>,
        kill: CancellationToken,
        viewer: Viewer,
        from_log: bool,
    ) -> Result<(Subscription, Start)> {
        let loaded = self.engine.load(owner, id).await?;
        let permit = self.engine.stream_permit(owner)?;
        if let Some(cursor) = cursor {
            loaded.events.backfill(cursor).await;
        }
        let (mut subscription, start) = match from_log {
            true => loaded.events.subscribe_logged(cursor, kill, viewer).await,
            false => loaded.events.subscribe(cursor, kill, viewer),
        };
        subscription.hold(permit);
        Ok((subscription, start))
    }

    /// Who is on the owner's session now, on every node: its views, those that can
    /// answer approvals, the visible ones among them, by kind of client.
    pub async fn presence(&self, owner: &UserId, id: &SessionId) -> Result<Presence> {
        let loaded = self.engine.load(owner, id).await?;
        let here = loaded.events.watchers_here();
        Ok((here + self.engine.inner.env.watchers_elsewhere(id).await).presence())
    }
}

impl Engine {
    /// Whether `owner` may create one more session now: within the creation rate and
    /// under the cap on sessions not archived (see [`crate::caps`]).
    pub(super) async fn admit_session(&self, owner: &UserId) -> Result<()> {
        let caps = &self.inner.config.caps;
        if self.store().count_sessions(owner, false).await? >= caps.max_sessions as u64 {
            return Err(crate::caps::sessions_full(caps));
        }
        self.inner.session_rate.take(caps, owner, self.inner.config.clock.now_ms())
    }

    /// Which of `sessions` wait for a person, from the store's pending approvals (so a
    /// run parked before a restart, or on another node, counts too): one query a project,
    /// then one for each session it names. A session whose only pending approvals are
    /// client tool calls waits for a program, not a person, and is left out.
    pub(crate) async fn waiting_among<'a>(
        &self,
        sessions: impl IntoIterator<Item = &'a Session>,
    ) -> Result<HashSet<SessionId>> {
        let projects: HashSet<&ProjectId> = sessions.into_iter().map(|s| &s.project_id).collect();
        let mut waiting = HashSet::new();
        for project in projects {
            for session in self.store().waiting_sessions(project).await? {
                let pending = self.store().pending_approvals(&session).await?;
                if pending.iter().any(|approval| !approval.is_client_call()) {
                    waiting.insert(session);
                }
            }
        }
        Ok(waiting)
    }

    /// A session as lists show it; `waiting` from [`Engine::waiting_among`].
    pub(crate) fn session_info(&self, session: Session, waiting: &HashSet<SessionId>) -> SessionInfo {
        SessionInfo { status: self.status_of(&session.id), waiting: waiting.contains(&session.id), session }
    }

    pub(crate) fn status_of(&self, id: &SessionId) -> SessionStatus {
        match self.inner.sessions.get(id).and_then(|l| l.active()) {
            Some(_) => SessionStatus::Busy,
            None => SessionStatus::Idle,
        }
    }

    /// Drops a deleted session from memory; its streams end saying so.
    pub(super) async fn unload(&self, id: &SessionId, loaded: &Arc<Loaded>) {
        stop_active(loaded).await;
        let _control = loaded.control.lock().await;
        loaded.events.close(Ended::SessionDeleted);
        self.inner.sessions.remove(id);
    }

    /// The session record, checked for ownership, without loading it.
    pub(crate) async fn owned_session(&self, owner: &UserId, id: &SessionId) -> Result<Session> {
        match self.store().get_session(id).await? {
            Some(s) if &s.owner_id == owner => Ok(s),
            _ => Err(EngineError::NotFound("session")),
        }
    }

    /// Loads a session into memory (once) and checks ownership.
    pub(crate) async fn load(&self, owner: &UserId, id: &SessionId) -> Result<Arc<Loaded>> {
        // With a shared store and no frame bus, other nodes write to sessions this node
        // holds unseen: a view nobody here uses is read again from the store. (A frame
        // bus keeps views live.)
        let unused = match self.inner.config.shared_store && self.inner.frames.is_none() {
            true => Unused::Reload,
            false => Unused::Keep,
        };
        let owned = |loaded: Arc<Loaded>| match loaded.events.read(|s| &s.session.owner_id == owner) {
            true => Ok(loaded),
            false => Err(EngineError::NotFound("session")),
        };
        if let Some(loaded) = self.inner.sessions.touch(id, unused) {
            return owned(loaded);
        }
        // One load of a session at a time; whoever waited finds it loaded.
        let gate = self.inner.sessions.loading(id);
        let _loading = gate.lock().await;
        if let Some(loaded) = self.inner.sessions.touch(id, unused) {
            return owned(loaded);
        }
        let session = self.owned_session(owner, id).await?;
        let project = self.store().get_project(&session.project_id).await?.ok_or(EngineError::NotFound("session"))?;
        // Bus mode: listen before reading the store, so every change after the read
        // arrives as a frame (one that the read already has folds in harmlessly).
        let opened = match &self.inner.frames {
            Some(bus) => Some(crate::events::Opened::open(&**bus, id).await.map_err(bus_error)?),
            None => None,
        };
        // A run parked at an approval (perhaps before a restart) keeps the session busy.
        let interrupted = self.store().interrupted_run(id).await?;
        let pending = self.store().pending_approvals(id).await?;
        // With a shared store, "no pending approval" may also mean another node has just
        // won the decision and is restarting the run: its lease says so. An expired
        // lease is the reaper's to settle (it resumes a decided call that never ran).
        let resuming_elsewhere = match self.inner.config.shared_store {
            true => self.store().get_lease(id).await?.is_some(),
            false => false,
        };
        if let Some(mut run) = interrupted.clone().filter(|_| pending.is_empty() && !resuming_elsewhere) {
            // The process stopped between taking a decision and restarting the run: the
            // decision is recorded, the continuation is lost, and re-running the tool
            // could repeat a side effect. Settle it as failed, like a crashed run.
            let now = now_ms();
            run.status = RunStatus::Failed;
            run.updated_at = now;
            run.ended_at = Some(now);
            run.error = Some(RunError {
                code: "server_restarted".into(),
                message: "the server stopped while this run was resuming from an approval".into(),
            });
            self.store().update_run(&run).await?;
        }
        let state = self.stored_view(session).await?;
        let handle = match (&state.active_run, state.pending_approvals.first()) {
            // Parked: a running run's pending approval is a live ask, its call waiting
            // on the node that runs it.
            (Some(run), Some(approval)) if run.status == RunStatus::Interrupted => {
                let mut h = ActiveHandle::new(run.run_id.clone());
                h.interrupted = Some(approval.id.clone());
                h.finished.cancel();
                Some(h)
            }
            _ => None,
        };
        let (limits, lists) = (self.inner.config.limits, self.inner.lists.clone());
        let metrics = self.inner.env.metrics.clone();
        let events = match (&self.inner.frames, opened) {
            (Some(bus), Some(opened)) => {
                let follower = Arc::new(EngineFollower { inner: Arc::downgrade(&self.inner) });
                let node = self.inner.config.node_id.clone();
                let events =
                    SessionEvents::followed(state, limits, lists, metrics, bus.clone(), follower.clone(), opened, node);
                // Every node reads the logs; the one running a run writes its log.
                if self.inner.config.frame_log {
                    events.log_runs(self.inner.run_log.clone());
                }
                // A run on another node has streamed text the store does not hold yet.
                events.catch_up_with_runner(&*follower).await;
                events
            }
            _ => {
                let events = SessionEvents::observed(id.clone(), state, limits, lists, metrics);
                if self.inner.config.frame_log {
                    events.log_runs(self.inner.run_log.clone());
                }
                events
            }
        };
        if let Some(settle) = self.inner.config.presence {
            let bus = self.inner.frames.clone().map(|bus| (bus, self.inner.config.node_id.clone()));
            events.announce_presence(settle, bus);
        }
        if let Some(count) = self.parked_count(handle.as_ref()).await {
            events.resume_run_count(count);
        }
        let fresh = Arc::new(Loaded {
            events,
            root_id: project.dir,
            root: PathBuf::from(project.path),
            control: tokio::sync::Mutex::new(()),
            record: tokio::sync::Mutex::new(()),
            active: Mutex::new(handle),
            touched: std::sync::atomic::AtomicI64::new(self.inner.config.clock.now_ms()),
        });
        // Two concurrent loads: the first insert wins and both use it.
        Ok(self.inner.sessions.insert(id, fresh))
    }

    /// The run-stream counter of a run parked at an approval, from the sequence its
    /// checkpoint keeps: a session loaded after a restart (or an unload) numbers the
    /// run's continuation on from its `interrupt`, so a client that holds the events up
    /// to it drops none of what follows. `None` when the checkpoint has no sequence.
    pub(super) async fn parked_count(&self, handle: Option<&ActiveHandle>) -> Option<crate::RunCount> {
        let handle = handle?;
        let approval = handle.interrupted.as_ref()?;
        let (_, checkpoint) = match self.store().get_approval(approval).await {
            Ok(found) => found?,
            Err(error) => {
                tracing::warn!(%approval, %error, "cannot read a parked run's checkpoint; its run stream numbers anew");
                return None;
            }
        };
        let sequence = serde_json::from_value::<crate::run::Checkpoint>(checkpoint).ok()?.sequence?;
        Some(crate::RunCount::parked(handle.run_id.clone(), sequence, approval.clone()))
    }

    /// The session's view as the store has it: the latest rounds, their timings, a run
    /// parked at an approval (with its approvals) or executing on another node.
    pub(super) async fn stored_view(&self, session: Session) -> Result<SessionState> {
        let id = session.id.clone();
        let latest = self.store().latest_rounds(&id, SNAPSHOT_USER_ROUNDS).await?;
        let total = self.store().count_messages(&id).await?;
        let mut state = view::initial_state(session, latest, total);
        state.todos = self.store().get_todos(&id).await?;
        // The timing rows of the shown rounds survive a reload or restart.
        for run in self.store().runs_since(&id, state.first_index).await? {
            view::set_timing(&mut state, frame::PromptTiming::of(&run));
        }
        state.queue = self.store().queued_prompts(&id).await?.into_iter().map(|q| q.message).collect();
        state.queue_paused = self.store().queue_paused(&id).await?;
        // The shown rounds' turns that have other versions (a branch switcher on each).
        state.variants = self.store().variants(&id, state.first_index).await?;
        state.revert = self.reverts().pending_of(&id).await?;
        let pending = self.store().pending_approvals(&id).await?;
        let interrupted = self.store().interrupted_run(&id).await?;
        // Only a frame bus brings the run's end to this view; without one a view that
        // said busy could stay so.
        let running = match (&interrupted, self.inner.frames.is_some()) {
            (None, true) => {
                self.store().runs_since(&id, 0).await?.into_iter().rev().find(|r| r.status == RunStatus::Running)
            }
            _ => None,
        };
        if let Some(run) = interrupted.filter(|_| !pending.is_empty()) {
            state.pending_approvals = pending;
            state.status = SessionStatus::Busy;
            state.active_run =
                Some(ActiveRun { run_id: run.id.clone(), request_id: run.request_id.clone(), status: run.status });
        } else if let Some(run) = running {
            // Executing on another node (a shared store): busy until it settles there.
            // What it asks the person while a call runs (live asks) is pending too.
            state.pending_approvals = pending.into_iter().filter(|a| a.run_id == run.id).collect();
            state.status = SessionStatus::Busy;
            state.active_run = Some(ActiveRun { run_id: run.id, request_id: run.request_id, status: run.status });
        }
        if state.active_run.is_none() {
            // No run is active, so no call can be running: one whose run a crash ended
            // before it had a result shows as ended, not as running for ever.
            for exec in state.tool_executions.values_mut().filter(|e| e.status == frame::ToolStatus::Running) {
                exec.status = frame::ToolStatus::Error;
                exec.result = Some("This call did not finish: its run ended before it had a result.".into());
            }
        }
        Ok(state)
    }
}

/// A rule's action as the API spells it.
pub(super) fn action_name(action: PermissionAction) -> &'static str {
    match action {
        PermissionAction::Allow => "allow",
        PermissionAction::Ask => "ask",
        PermissionAction::Deny => "deny",
    }
}

/// Where the sessions clients named are kept (see [`Sessions::named_or_create`]).
pub(super) fn name_scope(owner: &UserId) -> String {
    format!("session-name:{owner}")
}

/// The session a kept name record holds.
pub(super) fn named(name: &str, answer: String) -> Result<SessionId> {
    answer.parse().map_err(|_| EngineError::Conflict {
        code: "name_unusable",
        message: format!("the session name {name:?} is taken by a record this server cannot read"),
    })
}

/// Another request is creating the session this name stands for.
pub(super) fn name_in_progress(name: &str) -> EngineError {
    EngineError::Conflict {
        code: "name_in_progress",
        message: format!("the session for {name:?} is being created by another request; retry"),
    }
}

/// A history page's size: `limit`, or the default; 400 `invalid_limit` outside 1..=MAX_PAGE.
pub(crate) fn page_limit(limit: Option<u32>) -> Result<u32> {
    let limit = limit.unwrap_or(DEFAULT_PAGE);
    if limit == 0 || limit > MAX_PAGE {
        return Err(EngineError::invalid("invalid_limit", format!("limit must be between 1 and {MAX_PAGE}")));
    }
    Ok(limit)
}
