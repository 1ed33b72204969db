//! The engine's runs: a prompt accepted (or queued) and launched, aborted, decided at
//! an approval and resumed, and read back.

use super::*;
use spool_protocol::api::AttachmentInfo;

/// `engine.runs()`: prompts (started or queued), aborts, approvals and their decisions,
/// run records and run streams.
#[derive(Clone, Copy)]
pub struct Runs<'a> {
    pub(crate) engine: &'a Engine,
}

impl Runs<'_> {
    /// Accepts a prompt. The same `request_id` in the same session returns the run it
    /// started before and starts nothing; a prompt while a run is active is refused.
    /// (A prompt that may wait in the session's queue goes through [`submit`](Self::submit).)
    pub async fn prompt(&self, owner: &UserId, id: &SessionId, input: PromptInput) -> Result<PromptAccepted> {
        match self.submit(owner, id, PromptInput { multitask: Multitask::Reject, ..input }).await? {
            Submitted::Started(accepted) => Ok(accepted),
            // Only a requestId that was queued before (through `submit`) comes back queued.
            Submitted::Queued(queued) => Err(EngineError::Conflict {
                code: "prompt_queued",
                message: format!(
                    "requestId {} is queued ({}); it runs when the session's active run settles",
                    queued.request_id, queued.message_id
                ),
            }),
        }
    }

    /// Accepts a prompt. While a run is going, its `multitask` decides: `Reject` answers
    /// busy; `Enqueue` puts it in the session's queue (see [`crate::queue`]), to run in
    /// order once the runs before it have settled; `Interrupt` cancels the run (its
    /// messages stay) and starts this prompt after them; `Rollback` cancels it, shelves
    /// its turn as a branch of kind `rollback` and starts this prompt in the turn's
    /// place. The cancelling and the start happen under the session's control lock, so
    /// an interrupting prompt starts ahead of any queued one, and the queue goes on
    /// after it. The same `request_id` returns the run it started or the message it
    /// queued, and starts, queues or cancels nothing.
    pub async fn submit(&self, owner: &UserId, id: &SessionId, input: PromptInput) -> Result<Submitted> {
        let PromptInput {
            text,
            request_id,
            approval_policy,
            on_disconnect,
            multitask,
            at,
            regenerate,
            client_tools,
            files,
        } = input;
        let queue = multitask == Multitask::Enqueue;
        // A queued prompt has nowhere to keep its tools (a follow-up migration may add
        // it): refused whether or not it would have waited, so a client learns at once.
        if queue && !client_tools.is_empty() {
            return Err(EngineError::invalid(
                "client_tools_not_queueable",
                "a prompt that declares client tools cannot be queued; send it when the session is idle",
            ));
        }
        let client_tools = crate::client_tools::check_declared(client_tools, &self.engine.inner.env.tools)?;
        if at.is_some() && multitask != Multitask::Reject {
            return Err(EngineError::invalid(
                "invalid_prompt",
                "a prompt that edits a turn (`at`) cannot be queued, interrupt or roll back a run",
            ));
        }
        if regenerate && at.is_none() {
            return Err(EngineError::invalid(
                "invalid_prompt",
                "`regenerate` needs `at`: the user message to answer again",
            ));
        }
        if text.len() > self.engine.inner.config.max_prompt_bytes {
            return Err(EngineError::TooLarge {
                code: "prompt_too_large",
                message: format!(
                    "the prompt is {} bytes; the limit is {}",
                    text.len(),
                    self.engine.inner.config.max_prompt_bytes
                ),
            });
        }
        // A regenerate may leave the text out: the turn's own prompt is asked again; a
        // prompt of files alone has none.
        if text.trim().is_empty() && !regenerate && files.is_empty() {
            return Err(EngineError::invalid("empty_prompt", "the prompt text is empty"));
        }
        if let Some(r) = &request_id
            && (r.is_empty() || r.len() > MAX_REQUEST_ID || !r.bytes().all(|b| b.is_ascii_graphic()))
        {
            return Err(EngineError::invalid(
                "invalid_request_id",
                format!("requestId must be 1 to {MAX_REQUEST_ID} printable ASCII characters"),
            ));
        }
        let loaded = self.engine.load(owner, id).await?;
        // A project registered before the roots (or the data directory rule) existed
        // keeps its history, but runs no tools there.
        self.engine.inner.fence.check_existing(owner, self.engine.inner.auth.auth_required().await?, &loaded.root)?;
        // And one registered before a directory belonged to one user.
        let project = loaded.events.read(|s| s.session.project_id.clone());
        self.engine.check_claims_at_run(owner, &project, self.engine.inner.auth.auth_required().await?).await?;
        crate::roots::check_identity(&loaded.root, loaded.root_id)?;
        let _control = loaded.control.lock().await;
        if let Some(request_id) = &request_id
            && let Some(run) = self.engine.store().find_run_by_request(id, request_id).await?
        {
            return Ok(Submitted::Started(PromptAccepted {
                request_id: run.request_id,
                run_id: run.id,
                created: false,
            }));
        }
        let queued = self.engine.store().queued_prompts(id).await?;
        if let Some(request_id) = &request_id
            && let Some(position) = queued.iter().position(|q| &q.message.request_id == request_id)
        {
            return Ok(Submitted::Queued(PromptQueued::at(&queued[position].message, position)));
        }
        let active = loaded.active();
        let mut busy = match &active {
            Some(active) => !self.engine.settles_now(active).await?,
            None => false,
        };
        // An edit replaces turns: never while anything could still add to them.
        if at.is_some() && (busy || !queued.is_empty()) {
            let what =
                active.as_ref().filter(|_| busy).map_or_else(|| "prompts are queued".into(), |a| a.run_id.to_string());
            return Err(EngineError::SessionBusy(what));
        }
        let edited = match at {
            Some(index) => Some(self.engine.user_message_at(id, index).await?),
            None => None,
        };
        let text = match &edited {
            Some(turn) if text.trim().is_empty() => turn.message.text(),
            _ => text,
        };
        if text.trim().is_empty() && files.is_empty() {
            return Err(EngineError::invalid("empty_prompt", "the prompt text is empty"));
        }
        if !files.is_empty() {
            // A file the session's model cannot read is refused here, never dropped on
            // the way to it.
            let choice = loaded.events.read(|s| s.session.model.clone());
            let model = self.engine.inner.env.models.resolve(choice.as_deref()).model.clone();
            self.engine.attachments().check_readable(owner, &files, &*model).await?;
        }
        let wanted = Wanted { text, request_id, approval_policy, on_disconnect, client_tools };
        // Behind the queue even when no run is going (one is about to take the queue's
        // first message): the queue keeps the order prompts came in.
        if queue && (busy || !queued.is_empty()) {
            if !queued.is_empty() {
                self.engine.unpause_for_prompt(id).await?;
            }
            // Bound now, so the session holds them while the prompt waits.
            let files = self.engine.attachments().for_prompt(owner, id, &files).await?;
            let answer = self.engine.enqueue(&loaded, owner, wanted, files).await?;
            if !busy {
                self.engine.inner.env.run_settled(id);
            }
            return Ok(Submitted::Queued(answer));
        }
        // Interrupt or roll back: the going run settles `cancelled` before this prompt is
        // stored. A run that settled on its own meanwhile is left as it ended (and a
        // rollback still takes its turn off the path: it was going when asked).
        let mut rolled_back = None;
        if busy && matches!(multitask, Multitask::Interrupt | Multitask::Rollback) {
            if let Some(cancelled) = self.engine.inner.approvals.abort_held(&loaded).await?
                && multitask == Multitask::Rollback
            {
                let run = self.engine.store().get_run(&cancelled).await?.ok_or(EngineError::NotFound("run"))?;
                rolled_back = Some(run.user_message_index);
            }
            busy = false;
        }
        if let Some(active) = active.filter(|_| busy) {
            return Err(EngineError::SessionBusy(active.run_id.to_string()));
        }
        let limit = self.engine.inner.config.max_runs_per_user;
        if self.engine.active_runs_of(owner) >= limit {
            return Err(EngineError::TooMany {
                code: "too_many_runs",
                message: format!("you already have {limit} active runs; wait for one to settle or abort one"),
            });
        }
        // Another node may be running this session: the lease decides.
        let lease = match LeaseGuard::take(&self.engine.inner.leases, id).await {
            Ok(lease) => lease,
            // That node takes the queue when its run settles.
            Err(EngineError::SessionBusy(_)) if queue => {
                let files = self.engine.attachments().for_prompt(owner, id, &files).await?;
                return Ok(Submitted::Queued(self.engine.enqueue(&loaded, owner, wanted, files).await?));
            }
            Err(e) => return Err(e),
        };
        if self.engine.is_stale(&loaded).await? {
            // Another node wrote to the session since this one loaded it: start over
            // from the store.
            drop((_control, lease));
            self.engine.forget_stale(id);
            let Wanted { text, request_id, approval_policy, on_disconnect, client_tools } = wanted;
            let input = PromptInput {
                text,
                request_id,
                approval_policy,
                on_disconnect,
                multitask,
                at,
                regenerate,
                client_tools,
                files,
            };
            return Box::pin(self.submit(owner, id, input)).await;
        }
        let request_id = wanted.request_id.clone().unwrap_or_else(|| format!("req_{}", ulid_body()));
        let mut run = self.engine.new_run(&loaded, request_id);
        // An edit: the turns from `at` on leave the path (a branch keeps them) and the
        // prompt takes their place, so the model's next request holds only the new path.
        // A rollback likewise: the cancelled run's turn leaves and this prompt takes it.
        let shelved = match (&edited, rolled_back) {
            (Some(turn), _) => {
                let kind = if regenerate { BranchKind::Regenerate } else { BranchKind::Edit };
                run.user_message_index = turn.index;
                self.engine.store().shelve(id, turn.index, kind).await?
            }
            (None, Some(index)) => {
                run.user_message_index = index;
                self.engine.store().shelve(id, index, BranchKind::Rollback).await?
            }
            (None, None) => None,
        };
        let mut prompt = self.engine.prompt_message(&run, MessageId::default(), wanted.text.clone());
        if !files.is_empty() {
            let files = self.engine.attachments().for_prompt(owner, id, &files).await?;
            with_files(&mut prompt.message, files);
        }
        // Held to the lease just taken: a node that lost it meanwhile starts nothing.
        let started = self.engine.store().fenced(lease.fence().clone()).start_run(&run, &prompt).await;
        if let Some(ordinal) = shelved
            && !matches!(started, Ok(RunInsert::Created))
        {
            // Nothing took the turns' place: they go back as they were.
            self.engine.store().unshelve(id, ordinal).await?;
        }
        if let RunInsert::Existing(run) = started? {
            return Ok(Submitted::Started(PromptAccepted {
                request_id: run.request_id,
                run_id: run.id,
                created: false,
            }));
        }
        if shelved.is_some() {
            self.engine.republish_stored(&loaded, id).await?;
        }
        Ok(Submitted::Started(self.engine.launch(&loaded, run, wanted, lease, prompt)))
    }

    /// Aborts the session's active run and waits until it is settled as `cancelled`.
    /// Returns the run id, or `None` when nothing was running.
    ///
    /// A run parked at an approval is cancelled together with its approval. A run on
    /// another node is aborted there (see [`crate::remote`]).
    pub async fn abort(&self, owner: &UserId, id: &SessionId) -> Result<Option<RunId>> {
        let loaded = self.engine.load(owner, id).await?;
        // Stop stops: the queued prompts wait, paused, instead of starting (crate::queue).
        self.engine.pause_queue_for_stop(&loaded).await?;
        match self.engine.abort_loaded(&loaded).await? {
            Some(run) => Ok(Some(run)),
            None => match &self.engine.inner.remote {
                Some(remote) => remote.abort_elsewhere(id).await,
                None => Ok(None),
            },
        }
    }

    // ---- approvals --------------------------------------------------------------------

    /// Applies a decision to an approval of `owner`'s, addressed at `target` (see
    /// [`crate::approvals`] for the order of checks).
    pub async fn decide(
        &self,
        owner: &UserId,
        target: DecisionTarget,
        approval_id: &ApprovalId,
        input: DecisionInput,
    ) -> Result<DecisionOutcome> {
        Approvals::check(&input)?;
        let approvals = &self.engine.inner.approvals;
        let (approval, checkpoint) = approvals.find(owner, &target, approval_id).await?;
        let loaded = self.engine.load(owner, &approval.session_id).await?;
        approvals.decide(&loaded, owner, approval, checkpoint, input).await
    }

    /// Every approval of `owner` still waiting for a decision, oldest first.
    pub async fn pending_approvals(&self, owner: &UserId) -> Result<Vec<Approval>> {
        self.engine.inner.approvals.pending_of(owner).await
    }

    /// One approval of `owner`, in whatever state it is.
    pub async fn approval(&self, owner: &UserId, id: &ApprovalId) -> Result<Approval> {
        self.engine.inner.approvals.get(owner, id).await
    }

    pub async fn get(&self, owner: &UserId, id: &RunId) -> Result<Run> {
        match self.engine.store().get_run(id).await? {
            Some(run) if &run.owner_id == owner => Ok(run),
            _ => Err(EngineError::NotFound("run")),
        }
    }

    /// The run the prompt with `request_id` became in session `id`, if it became one (a
    /// queued prompt has none until a run takes it).
    pub async fn of_request(&self, owner: &UserId, id: &SessionId, request_id: &str) -> Result<Option<Run>> {
        let run = self.engine.store().find_run_by_request(id, request_id).await?;
        Ok(run.filter(|run| &run.owner_id == owner))
    }

    /// Subscribes a run-stream client to `run` after its event `after` (see
    /// [`SessionEvents::subscribe_from_run`]): one subscription, one of the user's
    /// streams, whatever the buffer still holds.
    ///
    /// Unlike [`Sessions::subscribe`] it does not backfill the ring from the
    /// bus's log: a replay starts at the frame marked with the client's last sequence,
    /// and backfilled frames carry no marks (see `run_sequence.rs`), so a backfill would
    /// cost a bus round trip and could never turn a snapshot into a replay.
    pub async fn subscribe(
        &self,
        owner: &UserId,
        run: &Run,
        after: RunAfter,
        kill: CancellationToken,
        viewer: crate::Viewer,
    ) -> Result<(Subscription, RunStart)> {
        let loaded = self.engine.load(owner, &run.session_id).await?;
        let permit = self.engine.stream_permit(owner)?;
        let (mut subscription, start) = loaded.events.subscribe_from_run(&run.id, after, kill, viewer);
        subscription.hold(permit);
        Ok((subscription, start))
    }

    /// Every run of the owner's session, oldest first: what each answer used and cost.
    pub async fn of_session(&self, owner: &UserId, id: &SessionId) -> Result<Vec<Run>> {
        let session = self.engine.owned_session(owner, id).await?;
        Ok(self.engine.store().runs_since(&session.id, 0).await?)
    }
}

/// Puts `files` at the start of a user message, before its text (as Anthropic advises
/// for images), leaving out a text block that is empty: a prompt run at once, one taken
/// from the queue and a steer read the same.
pub(crate) fn with_files(message: &mut Message, files: Vec<AttachmentInfo>) {
    if files.is_empty() {
        return;
    }
    if let Message::User { content, .. } = message {
        content.retain(|c| !matches!(c, Content::Text { text } if text.trim().is_empty()));
        content.splice(0..0, files.into_iter().map(Content::from));
    }
}

impl Engine {
    /// True when `active` is a run whose settlement is already stored and that is only
    /// publishing its last frames: a client that saw it settle (its record, a `done`
    /// event) may prompt at once, so the prompt waits for it (briefly) instead of
    /// answering `session_busy` for a run that is over.
    pub(super) async fn settles_now(&self, active: &ActiveHandle) -> Result<bool> {
        let stored = self.store().get_run(&active.run_id).await?;
        if !stored.is_some_and(|run| run.status.is_terminal()) {
            return Ok(false);
        }
        Ok(tokio::time::timeout(SETTLING_GRACE, active.finished.cancelled()).await.is_ok())
    }

    /// The user message `run` answers, as it is stored with the run: `text` at the run's
    /// user message index, timed when the run was accepted.
    pub(crate) fn prompt_message(&self, run: &Run, id: MessageId, text: String) -> IndexedMessage {
        IndexedMessage { id, index: run.user_message_index, message: Message::user_text(text, run.created_at) }
    }

    /// A new run of the loaded session, answering a prompt with this request id.
    pub(crate) fn new_run(&self, loaded: &Loaded, request_id: String) -> Run {
        let now = now_ms();
        let (session_id, owner_id) = loaded.events.read(|s| (s.session.id.clone(), s.session.owner_id.clone()));
        Run {
            id: RunId::new(),
            session_id,
            owner_id,
            request_id,
            status: RunStatus::Running,
            user_message_index: loaded.events.read(|s| s.total),
            created_at: now,
            updated_at: now,
            first_token_at: None,
            ended_at: None,
            usage: Usage::default(),
            error: None,
        }
    }

    /// Starts `run`, stored already, on this node: it becomes the session's active run,
    /// the accepted frames go out, and its task takes the lease over. `prompt` is its
    /// user message, stored with the run.
    pub(crate) fn launch(
        &self,
        loaded: &Arc<Loaded>,
        run: Run,
        wanted: Wanted,
        lease: LeaseGuard,
        prompt: IndexedMessage,
    ) -> PromptAccepted {
        let request_id = run.request_id.clone();
        let handle = ActiveHandle::new(run.id.clone());
        loaded.set_active(Some(handle.clone()));
        let accepted = PromptAccepted { request_id: request_id.clone(), run_id: run.id.clone(), created: true };
        loaded.events.publish_body(FrameBody::RunAccepted { request_id: request_id.clone(), run_id: run.id.clone() });
        let active_run = ActiveRun { run_id: run.id.clone(), request_id, status: RunStatus::Running };
        loaded.events.publish(|state| {
            state.status = SessionStatus::Busy;
            state.active_run = Some(active_run);
            Some(FrameBody::State { state: Box::new(state.clone()) })
        });
        // Logged in the caller's span (an HTTP request's, with its id): the line that
        // ties a request to the run it started.
        tracing::info!(run = %run.id, session = %run.session_id, "run accepted");
        let policy = wanted.approval_policy.unwrap_or(self.inner.config.approval_policy);
        let asked = Asked {
            prompt: wanted.text,
            policy,
            on_disconnect: wanted.on_disconnect,
            client_tools: wanted.client_tools,
        };
        let held = lease.keep();
        let task =
            RunTask::new(self.inner.env.clone(), loaded.clone(), run, handle, asked, held).with_stored_prompt(prompt);
        tokio::spawn(task.execute());
        accepted
    }

    /// Aborts the run this node has of a loaded session, if any.
    pub(crate) async fn abort_loaded(&self, loaded: &Arc<Loaded>) -> Result<Option<RunId>> {
        self.inner.approvals.abort(loaded).await
    }

    /// Asks the node running `session` (the lease holder; perhaps this one) for a full
    /// snapshot frame on the frame bus. `false` when no node holds the lease (the store
    /// then has the whole state) or this node holds it without the session loaded.
    pub(crate) async fn request_snapshot(&self, session: &SessionId) -> bool {
        let lease = match self.inner.store.get_lease(session).await {
            Ok(lease) => lease.filter(|l| l.expires_at > self.inner.config.clock.now_ms()),
            Err(error) => {
                tracing::warn!(%session, %error, "cannot read a session's lease to ask for a snapshot");
                return false;
            }
        };
        let Some(lease) = lease else { return false };
        if lease.node_id == self.inner.config.node_id {
            return self.inner.sessions.resync(session);
        }
        let Some(remote) = &self.inner.remote else { return false };
        remote.ask_resync(lease.node_id, session);
        true
    }

    /// Resumes a run whose approving decision was acknowledged before a crash and whose
    /// tool never started.
    pub(crate) async fn resume_decided(&self, decided: DecidedCall) -> Result<()> {
        let loaded = self.load(&decided.approval.owner_id, &decided.approval.session_id).await?;
        self.inner.approvals.resume_decided(&loaded, decided).await
    }

    /// Expires every approval a run arms (see [`RunEnv::arm_expiry`]) when its time
    /// comes, unless it was decided before. The timers hold the engine weakly: a gone
    /// engine expires nothing.
    pub(super) fn spawn_expiries(&self, mut armed: Expiries) {
        let weak = Arc::downgrade(&self.inner);
        let clock = self.inner.config.clock.clone();
        tokio::spawn(async move {
            while let Some(approval) = armed.recv().await {
                let (weak, clock) = (weak.clone(), clock.clone());
                tokio::spawn(async move {
                    clock.sleep_until(approval.expires_at).await;
                    let Some(inner) = weak.upgrade() else { return };
                    let engine = Engine { inner };
                    let outcome = async {
                        let loaded = engine.load(&approval.owner_id, &approval.session_id).await?;
                        engine.inner.approvals.expire(&loaded, &approval.id).await
                    };
                    if let Err(e) = outcome.await
                        && !matches!(e, EngineError::NotFound(_))
                    {
                        tracing::warn!(approval = %approval.id, error = %e, "could not expire an approval");
                    }
                });
            }
        });
    }
}
