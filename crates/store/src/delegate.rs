//! The engine's [`Store`](spool_engine::Store) trait mapped onto a backend's modules,
//! once for both backends.
//!
//! Each backend (`sqlite`, `pg`) compiles the shared record modules (`src/sql/`) into
//! itself, so each has its own `users`, `projects`, … taking its own pool type; the
//! trait implementation (one impl block per record kind) is the same list of hand-offs for
//! both, so it is written once here as a macro and expanded in each backend module, where
//! those names are in scope.

/// Implements `Store` for `$store` (a type with a `pool` field and a `fence` field, the
/// fence its run's writes are held to, if any: see `Nodes::fenced`), one impl block per
/// record kind of `spool_engine::store` in the order the kinds are listed there, by
/// calling the record modules in scope where the macro is expanded. The writes a run
/// makes hand the fence on; `sql/leases.rs` says how it holds.
macro_rules! impl_store {
    ($store:ty) => {
        // A block of its own so these imports do not leak into the backend module.
        const _: () = {
            use spool_engine::store;
            use spool_engine::{
                Draft, IdempotencyClaim, Lease, LeaseFence, Listener, LoginSession, RunInsert, StoreError,
            };
            use spool_protocol::time::Millis;
            use spool_protocol::*;

            #[async_trait::async_trait]
            impl store::Users for $store {
                async fn ensure_user(&self, name: &str) -> Result<UserId, StoreError> {
                    users::ensure(&self.pool, name).await
                }
                async fn user_id(&self, name: &str) -> Result<Option<UserId>, StoreError> {
                    users::id(&self.pool, name).await
                }
                async fn user_name(&self, id: &UserId) -> Result<Option<String>, StoreError> {
                    users::name(&self.pool, id).await
                }
            }

            #[async_trait::async_trait]
            impl store::Credentials for $store {
                async fn insert_token(&self, token: &ApiToken) -> Result<(), StoreError> {
                    tokens::insert(&self.pool, token).await
                }
                async fn find_token(&self, hash: &str) -> Result<Option<ApiToken>, StoreError> {
                    tokens::find(&self.pool, hash).await
                }
                async fn list_tokens(&self) -> Result<Vec<ApiToken>, StoreError> {
                    tokens::list(&self.pool).await
                }
                async fn revoke_token(&self, id: &TokenId, at: Millis) -> Result<bool, StoreError> {
                    tokens::revoke(&self.pool, id, at).await
                }
                async fn auth_enabled(&self) -> Result<bool, StoreError> {
                    auth::enabled(&self.pool).await
                }
                async fn set_auth_enabled(&self, enabled: bool, at: Millis) -> Result<(), StoreError> {
                    auth::set_enabled(&self.pool, enabled, at).await
                }
                async fn insert_login(&self, login: &LoginSession) -> Result<(), StoreError> {
                    auth::insert_login(&self.pool, login).await
                }
                async fn find_login(&self, hash: &str, now: Millis) -> Result<Option<LoginSession>, StoreError> {
                    auth::find_login(&self.pool, hash, now).await
                }
                async fn end_login(&self, id: &LoginId, at: Millis) -> Result<bool, StoreError> {
                    auth::end_login(&self.pool, id, at).await
                }
                async fn credentials_ended_since(&self, since: Millis, now: Millis) -> Result<Vec<String>, StoreError> {
                    auth::ended_since(&self.pool, since, now).await
                }
            }

            #[async_trait::async_trait]
            impl store::Projects for $store {
                async fn insert_project(&self, project: &Project) -> Result<(), StoreError> {
                    projects::insert(&self.pool, project).await
                }
                async fn list_projects(&self, owner: &UserId) -> Result<Vec<Project>, StoreError> {
                    projects::list(&self.pool, owner).await
                }
                async fn all_projects(&self) -> Result<Vec<Project>, StoreError> {
                    projects::all(&self.pool).await
                }
                async fn projects_overlapping(&self, path: &str) -> Result<Vec<Project>, StoreError> {
                    projects::overlapping(&self.pool, path).await
                }
                async fn get_project(&self, id: &ProjectId) -> Result<Option<Project>, StoreError> {
                    projects::get(&self.pool, id).await
                }
                async fn update_project(&self, project: &Project) -> Result<(), StoreError> {
                    projects::update(&self.pool, project).await
                }
                async fn delete_project(&self, id: &ProjectId) -> Result<bool, StoreError> {
                    projects::delete(&self.pool, id).await
                }
            }

            #[async_trait::async_trait]
            impl store::Sessions for $store {
                async fn insert_session(&self, session: &Session) -> Result<(), StoreError> {
                    sessions::insert(&self.pool, session).await
                }
                async fn list_sessions(&self, project: &ProjectId, archived: bool) -> Result<Vec<Session>, StoreError> {
                    sessions::list(&self.pool, project, archived).await
                }
                async fn count_sessions(&self, owner: &UserId, archived: bool) -> Result<u64, StoreError> {
                    sessions::count(&self.pool, owner, archived).await
                }
                async fn get_session(&self, id: &SessionId) -> Result<Option<Session>, StoreError> {
                    sessions::get(&self.pool, id).await
                }
                async fn search_sessions(
                    &self,
                    owner: &UserId,
                    needle: &str,
                    before: Option<(Millis, SessionId)>,
                    limit: u32,
                    time_limit: std::time::Duration,
                ) -> Result<Vec<spool_engine::SessionMatch>, StoreError> {
                    search::sessions(&self.pool, owner, needle, before, limit, time_limit).await
                }
                async fn update_session(&self, session: &Session) -> Result<(), StoreError> {
                    sessions::update(&self.pool, self.fence.as_ref(), session).await
                }
                async fn delete_session(&self, id: &SessionId) -> Result<bool, StoreError> {
                    sessions::delete(&self.pool, id).await
                }
                async fn remove_session_rule(
                    &self,
                    session: &SessionId,
                    index: usize,
                    tool: &str,
                    action: PermissionAction,
                    updated_at: Millis,
                ) -> Result<spool_engine::RuleRemoval, StoreError> {
                    sessions::remove_rule(&self.pool, session, index, tool, action, updated_at).await
                }
                async fn session_guardrails(
                    &self,
                    session: &SessionId,
                ) -> Result<Option<spool_protocol::Guardrails>, StoreError> {
                    sessions::guardrails(&self.pool, session).await
                }
                async fn set_session_guardrails(
                    &self,
                    session: &SessionId,
                    guardrails: Option<&spool_protocol::Guardrails>,
                    updated_at: Millis,
                ) -> Result<(), StoreError> {
                    sessions::set_guardrails(&self.pool, session, guardrails, updated_at).await
                }
            }

            #[async_trait::async_trait]
            impl store::Messages for $store {
                async fn insert_message(
                    &self,
                    session: &SessionId,
                    owner: &UserId,
                    message: &IndexedMessage,
                ) -> Result<(), StoreError> {
                    messages::insert(&self.pool, self.fence.as_ref(), session, owner, message).await
                }
                async fn list_messages(
                    &self,
                    session: &SessionId,
                    before: Option<u64>,
                    limit: u32,
                ) -> Result<Vec<IndexedMessage>, StoreError> {
                    messages::list(&self.pool, session, before, limit).await
                }
                async fn count_messages(&self, session: &SessionId) -> Result<u64, StoreError> {
                    messages::count(&self.pool, session).await
                }
                async fn latest_rounds(
                    &self,
                    session: &SessionId,
                    rounds: usize,
                ) -> Result<Vec<IndexedMessage>, StoreError> {
                    messages::latest_rounds(&self.pool, session, rounds).await
                }
                async fn copy_messages(
                    &self,
                    from: &SessionId,
                    to: &SessionId,
                    owner: &UserId,
                    before: u64,
                ) -> Result<u64, StoreError> {
                    messages::copy(&self.pool, from, to, owner, before).await
                }
            }

            #[async_trait::async_trait]
            impl store::Drafts for $store {
                async fn append_draft(
                    &self,
                    draft: &Draft,
                    seq: u64,
                    deltas: &[StreamDelta],
                ) -> Result<u64, StoreError> {
                    drafts::append(&self.pool, self.fence.as_ref(), draft, seq, deltas).await
                }
                async fn delete_draft(&self, session: &SessionId) -> Result<(), StoreError> {
                    drafts::delete(&self.pool, self.fence.as_ref(), session).await
                }
                async fn orphaned_drafts(&self) -> Result<Vec<Draft>, StoreError> {
                    drafts::orphaned(&self.pool).await
                }
            }

            #[async_trait::async_trait]
            impl store::Notes for $store {
                async fn get_memory(&self, session: &SessionId) -> Result<SessionMemory, StoreError> {
                    memory::get(&self.pool, session).await
                }
                async fn put_memory(
                    &self,
                    session: &SessionId,
                    owner: &UserId,
                    value: &SessionMemory,
                ) -> Result<(), StoreError> {
                    memory::put(&self.pool, self.fence.as_ref(), session, owner, value).await
                }
                async fn get_todos(&self, session: &SessionId) -> Result<Vec<hub::Todo>, StoreError> {
                    todos::get(&self.pool, session).await
                }
                async fn put_todos(
                    &self,
                    session: &SessionId,
                    owner: &UserId,
                    value: &[hub::Todo],
                ) -> Result<(), StoreError> {
                    todos::put(&self.pool, self.fence.as_ref(), session, owner, value).await
                }
                async fn get_source_choices(
                    &self,
                    session: &SessionId,
                ) -> Result<std::collections::BTreeMap<String, bool>, StoreError> {
                    tool_sources::get(&self.pool, session).await
                }
                async fn set_source_choice(
                    &self,
                    session: &SessionId,
                    owner: &UserId,
                    source: &str,
                    enabled: bool,
                ) -> Result<(), StoreError> {
                    tool_sources::set(&self.pool, session, owner, source, enabled).await
                }
            }

            #[async_trait::async_trait]
            impl store::Runs for $store {
                async fn insert_run(&self, run: &Run) -> Result<RunInsert, StoreError> {
                    runs::insert(&self.pool, run).await
                }
                async fn start_run(&self, run: &Run, prompt: &IndexedMessage) -> Result<RunInsert, StoreError> {
                    runs::start(&self.pool, self.fence.as_ref(), run, prompt).await
                }
                async fn settle_run(&self, run: &Run) -> Result<bool, StoreError> {
                    runs::settle(&self.pool, self.fence.as_ref(), run).await
                }
                async fn find_run_by_request(
                    &self,
                    session: &SessionId,
                    request_id: &str,
                ) -> Result<Option<Run>, StoreError> {
                    runs::find_by_request(&self.pool, session, request_id).await
                }
                async fn get_run(&self, id: &RunId) -> Result<Option<Run>, StoreError> {
                    runs::get(&self.pool, id).await
                }
                async fn update_run(&self, run: &Run) -> Result<(), StoreError> {
                    runs::write(&self.pool, self.fence.as_ref(), run).await
                }
                async fn runs_since(&self, session: &SessionId, from_index: u64) -> Result<Vec<Run>, StoreError> {
                    runs::since(&self.pool, session, from_index).await
                }
                async fn sessions_ended_after(
                    &self,
                    project: &ProjectId,
                    after: Millis,
                    limit: u32,
                ) -> Result<Vec<SessionId>, StoreError> {
                    runs::ended_after(&self.pool, project, after, limit).await
                }
                async fn interrupted_run(&self, session: &SessionId) -> Result<Option<Run>, StoreError> {
                    runs::interrupted(&self.pool, session).await
                }
                async fn fail_running_runs(
                    &self,
                    error: &RunError,
                    now: Millis,
                    keep: &[RunId],
                ) -> Result<u64, StoreError> {
                    runs::fail_running(&self.pool, error, now, keep).await
                }
            }

            #[async_trait::async_trait]
            impl store::Queue for $store {
                async fn queue_prompt(
                    &self,
                    prompt: &spool_engine::QueuedPrompt,
                    limits: spool_engine::QueueLimits,
                ) -> Result<spool_engine::QueueInsert, StoreError> {
                    queue::insert(&self.pool, prompt, limits).await
                }
                async fn queued_prompts(
                    &self,
                    session: &SessionId,
                ) -> Result<Vec<spool_engine::QueuedPrompt>, StoreError> {
                    queue::list(&self.pool, session).await
                }
                async fn get_queued(&self, id: &MessageId) -> Result<Option<spool_engine::QueuedPrompt>, StoreError> {
                    queue::get(&self.pool, id).await
                }
                async fn delete_queued(&self, id: &MessageId) -> Result<bool, StoreError> {
                    queue::delete(&self.pool, id).await
                }
                async fn take_queued(
                    &self,
                    id: &MessageId,
                    run: &Run,
                    prompt: &IndexedMessage,
                ) -> Result<Option<RunInsert>, StoreError> {
                    queue::take(&self.pool, self.fence.as_ref(), id, run, prompt).await
                }
                async fn queue_steer(
                    &self,
                    prompt: &spool_engine::QueuedPrompt,
                    limits: spool_engine::QueueLimits,
                ) -> Result<spool_engine::QueueInsert, StoreError> {
                    queue::insert_steer(&self.pool, prompt, limits).await
                }
                async fn queued_steers(
                    &self,
                    session: &SessionId,
                ) -> Result<Vec<spool_engine::QueuedPrompt>, StoreError> {
                    queue::steers(&self.pool, session).await
                }
                async fn take_steer(
                    &self,
                    id: &MessageId,
                    session: &SessionId,
                    owner: &UserId,
                    message: &IndexedMessage,
                ) -> Result<bool, StoreError> {
                    queue::take_steer(&self.pool, self.fence.as_ref(), id, session, owner, message).await
                }
                async fn queued_sessions(&self, limit: u32) -> Result<Vec<SessionId>, StoreError> {
                    queue::sessions(&self.pool, limit).await
                }
                async fn pause_queue(&self, session: &SessionId, at: Millis) -> Result<(), StoreError> {
                    queue::pause(&self.pool, session, at).await
                }
                async fn resume_queue(&self, session: &SessionId) -> Result<bool, StoreError> {
                    queue::resume(&self.pool, session).await
                }
                async fn queue_paused(&self, session: &SessionId) -> Result<bool, StoreError> {
                    queue::paused(&self.pool, session).await
                }
            }

            #[async_trait::async_trait]
            impl store::Approvals for $store {
                async fn interrupt_run(
                    &self,
                    run: &Run,
                    approval: &Approval,
                    checkpoint: &serde_json::Value,
                ) -> Result<(), StoreError> {
                    approvals::interrupt(&self.pool, self.fence.as_ref(), run, approval, checkpoint).await
                }
                async fn supersede_approval(
                    &self,
                    old: &spool_engine::Supersede<'_>,
                    run: &Run,
                    approval: &Approval,
                    checkpoint: &serde_json::Value,
                ) -> Result<bool, StoreError> {
                    approvals::supersede(&self.pool, old, run, approval, checkpoint).await
                }
                async fn get_approval(
                    &self,
                    id: &ApprovalId,
                ) -> Result<Option<(Approval, serde_json::Value)>, StoreError> {
                    approvals::get(&self.pool, id).await
                }
                async fn pending_approvals(&self, session: &SessionId) -> Result<Vec<Approval>, StoreError> {
                    approvals::pending(&self.pool, session).await
                }
                async fn all_pending_approvals(&self) -> Result<Vec<Approval>, StoreError> {
                    approvals::all_pending(&self.pool).await
                }
                async fn waiting_sessions(&self, project: &ProjectId) -> Result<Vec<SessionId>, StoreError> {
                    approvals::waiting_sessions(&self.pool, project).await
                }
                async fn settle_approval(
                    &self,
                    id: &ApprovalId,
                    status: ApprovalStatus,
                    decision: Option<&Decision>,
                    message: Option<&str>,
                    actor: Option<&UserId>,
                    at: Millis,
                ) -> Result<bool, StoreError> {
                    approvals::settle(&self.pool, id, status, decision, message, actor, at).await
                }
                async fn decided_calls(&self) -> Result<Vec<spool_engine::DecidedCall>, StoreError> {
                    approvals::decided_calls(&self.pool).await
                }
                async fn mark_call_started(&self, approval: &ApprovalId, at: Millis) -> Result<(), StoreError> {
                    approvals::mark_started(&self.pool, self.fence.as_ref(), approval, at).await
                }
            }

            #[async_trait::async_trait]
            impl store::Idempotency for $store {
                async fn claim_idempotency(
                    &self,
                    scope: &str,
                    key: &str,
                    now: Millis,
                ) -> Result<IdempotencyClaim, StoreError> {
                    idempotency::claim(&self.pool, scope, key, now).await
                }
                async fn complete_idempotency(&self, scope: &str, key: &str, answer: &str) -> Result<(), StoreError> {
                    idempotency::complete(&self.pool, scope, key, answer).await
                }
                async fn release_idempotency(&self, scope: &str, key: &str) -> Result<(), StoreError> {
                    idempotency::release(&self.pool, scope, key).await
                }
                async fn release_open_claims(&self, made_before: Millis) -> Result<Vec<(String, String)>, StoreError> {
                    idempotency::release_open(&self.pool, made_before).await
                }
            }

            #[async_trait::async_trait]
            impl store::RunFrames for $store {
                async fn append_run_frames(&self, chunk: &store::RunFrameChunk) -> Result<(), StoreError> {
                    run_frames::append(&self.pool, chunk).await
                }
                async fn run_frames(&self, run: &RunId) -> Result<Vec<store::RunFrameChunk>, StoreError> {
                    run_frames::read(&self.pool, run).await
                }
                async fn prune_run_frames(&self, before: Millis) -> Result<u64, StoreError> {
                    run_frames::prune(&self.pool, before).await
                }
            }

            #[async_trait::async_trait]
            impl store::StepSnapshots for $store {
                async fn insert_step_snapshot(&self, step: &store::StepSnapshot) -> Result<(), StoreError> {
                    step_snapshots::insert(&self.pool, self.fence.as_ref(), step).await
                }
                async fn finish_step_snapshot(
                    &self,
                    run: &RunId,
                    turn: u32,
                    after_tree: &str,
                    skipped: &spool_engine::snapshots::Skipped,
                ) -> Result<Option<u64>, StoreError> {
                    step_snapshots::finish(&self.pool, self.fence.as_ref(), run, turn, after_tree, skipped).await
                }
                async fn list_step_snapshots(
                    &self,
                    session: &SessionId,
                ) -> Result<Vec<store::StepSnapshot>, StoreError> {
                    step_snapshots::list(&self.pool, session).await
                }
                async fn prune_step_snapshots(&self, before: Millis) -> Result<u64, StoreError> {
                    step_snapshots::prune(&self.pool, before).await
                }
                async fn snapshot_trees(&self, project: &ProjectId) -> Result<Vec<String>, StoreError> {
                    step_snapshots::trees(&self.pool, project).await
                }
            }

            #[async_trait::async_trait]
            impl store::SessionReverts for $store {
                async fn put_session_revert(&self, revert: &store::SessionRevert) -> Result<(), StoreError> {
                    reverts::put(&self.pool, revert).await
                }
                async fn session_revert(
                    &self,
                    session: &SessionId,
                ) -> Result<Option<store::SessionRevert>, StoreError> {
                    reverts::get(&self.pool, session).await
                }
                async fn pending_session_reverts(
                    &self,
                    project: &ProjectId,
                ) -> Result<Vec<store::SessionRevert>, StoreError> {
                    reverts::pending_in(&self.pool, project).await
                }
                async fn delete_session_revert(&self, session: &SessionId) -> Result<bool, StoreError> {
                    reverts::delete(&self.pool, session).await
                }
            }

            #[async_trait::async_trait]
            impl store::Attachments for $store {
                async fn insert_attachment(&self, attachment: &store::Attachment) -> Result<(), StoreError> {
                    attachments::insert(&self.pool, attachment).await
                }
                async fn get_attachment(&self, id: &AttachmentId) -> Result<Option<store::Attachment>, StoreError> {
                    attachments::get(&self.pool, id).await
                }
                async fn bind_attachment(&self, id: &AttachmentId, session: &SessionId) -> Result<bool, StoreError> {
                    attachments::bind(&self.pool, id, session).await
                }
                async fn delete_attachment(&self, id: &AttachmentId) -> Result<bool, StoreError> {
                    attachments::delete(&self.pool, id).await
                }
                async fn delete_unbound_attachment(&self, id: &AttachmentId) -> Result<bool, StoreError> {
                    attachments::delete_unbound(&self.pool, id).await
                }
                async fn delete_unbound_attachments_before(&self, before: Millis) -> Result<Vec<String>, StoreError> {
                    attachments::delete_unbound_before(&self.pool, before).await
                }
                async fn attachment_bytes(&self, owner: &UserId) -> Result<u64, StoreError> {
                    attachments::bytes_of(&self.pool, owner).await
                }
                async fn session_attachment_shas(&self, session: &SessionId) -> Result<Vec<String>, StoreError> {
                    attachments::shas_of_session(&self.pool, session).await
                }
                async fn blob_in_use(&self, sha256: &str) -> Result<bool, StoreError> {
                    attachments::blob_in_use(&self.pool, sha256).await
                }
            }

            #[async_trait::async_trait]
            impl store::Branches for $store {
                async fn shelve(
                    &self,
                    session: &SessionId,
                    from_index: u64,
                    kind: BranchKind,
                ) -> Result<Option<u32>, StoreError> {
                    branches::shelve(&self.pool, session, from_index, kind).await
                }
                async fn unshelve(&self, session: &SessionId, ordinal: u32) -> Result<Option<u32>, StoreError> {
                    branches::unshelve(&self.pool, session, ordinal).await
                }
                async fn variants(&self, session: &SessionId, from_index: u64) -> Result<Vec<VariantSet>, StoreError> {
                    branches::variants(&self.pool, session, from_index).await
                }
                async fn list_branches(&self, session: &SessionId) -> Result<Vec<Branch>, StoreError> {
                    branches::list(&self.pool, session).await
                }
                async fn branch_messages(
                    &self,
                    session: &SessionId,
                    ordinal: u32,
                ) -> Result<Option<Vec<IndexedMessage>>, StoreError> {
                    branches::messages(&self.pool, session, ordinal).await
                }
            }

            #[async_trait::async_trait]
            impl store::Nodes for $store {
                async fn acquire_lease(
                    &self,
                    session: &SessionId,
                    node: &str,
                    now: Millis,
                    ttl: Millis,
                ) -> Result<Option<LeaseFence>, StoreError> {
                    leases::acquire(&self.pool, session, node, now, ttl).await
                }
                async fn renew_lease(&self, fence: &LeaseFence, now: Millis, ttl: Millis) -> Result<bool, StoreError> {
                    leases::renew(&self.pool, fence, now, ttl).await
                }
                async fn release_lease(&self, session: &SessionId, node: &str) -> Result<bool, StoreError> {
                    leases::release(&self.pool, session, node).await
                }
                async fn get_lease(&self, session: &SessionId) -> Result<Option<Lease>, StoreError> {
                    leases::get(&self.pool, session).await
                }
                async fn expired_leases(&self, now: Millis) -> Result<Vec<Lease>, StoreError> {
                    leases::expired(&self.pool, now).await
                }
                async fn record_listener(&self, listener: &Listener) -> Result<(), StoreError> {
                    auth::record_listener(&self.pool, listener).await
                }
                async fn remove_listener(&self, node: &str) -> Result<(), StoreError> {
                    auth::remove_listener(&self.pool, node).await
                }
                async fn listeners(&self) -> Result<Vec<Listener>, StoreError> {
                    auth::listeners(&self.pool).await
                }
                fn fenced(&self, fence: LeaseFence) -> std::sync::Arc<dyn spool_engine::Store> {
                    std::sync::Arc::new(Self { pool: self.pool.clone(), fence: Some(fence) })
                }
            }

            #[async_trait::async_trait]
            impl store::Push for $store {
                async fn server_key(&self, name: &str, fresh: &[u8], now: Millis) -> Result<Vec<u8>, StoreError> {
                    push::server_key(&self.pool, name, fresh, now).await
                }
                async fn delete_server_key(&self, name: &str) -> Result<bool, StoreError> {
                    push::delete_server_key(&self.pool, name).await
                }
                async fn save_push_subscription(
                    &self,
                    subscription: &store::PushSubscription,
                ) -> Result<store::PushSubscription, StoreError> {
                    push::save(&self.pool, subscription).await
                }
                async fn get_push_subscription(&self, id: &str) -> Result<Option<store::PushSubscription>, StoreError> {
                    push::get(&self.pool, id).await
                }
                async fn push_subscriptions(&self, owner: &UserId) -> Result<Vec<store::PushSubscription>, StoreError> {
                    push::list(&self.pool, owner).await
                }
                async fn delete_push_subscription(&self, id: &str) -> Result<bool, StoreError> {
                    push::delete(&self.pool, id).await
                }
                async fn delete_push_subscriptions_of(&self, login_id: &str) -> Result<u64, StoreError> {
                    push::delete_of(&self.pool, login_id).await
                }
                async fn record_push_attempt(&self, id: &str, ok: bool, at: Millis) -> Result<(), StoreError> {
                    push::record_attempt(&self.pool, id, ok, at).await
                }
            }

            #[async_trait::async_trait]
            impl store::Outbox for $store {
                async fn unfanned_events(&self, limit: u32) -> Result<Vec<store::StoredEvent>, StoreError> {
                    outbox::unfanned(&self.pool, limit).await
                }
                async fn fan_out(
                    &self,
                    event: &EventId,
                    targets: &[(String, Millis)],
                    now: Millis,
                ) -> Result<u64, StoreError> {
                    outbox::fan_out(&self.pool, event, targets, now).await
                }
                async fn claim_deliveries(
                    &self,
                    node: &str,
                    now: Millis,
                    lease_until: Millis,
                    limit: u32,
                ) -> Result<Vec<store::ClaimedDelivery>, StoreError> {
                    outbox::claim(&self.pool, node, now, lease_until, limit).await
                }
                async fn record_delivery(
                    &self,
                    claim: &store::DeliveryClaim,
                    outcome: &store::DeliveryOutcome,
                    now: Millis,
                ) -> Result<bool, StoreError> {
                    outbox::record(&self.pool, claim, outcome, now).await
                }
                async fn list_deliveries(
                    &self,
                    owner: Option<&UserId>,
                    status: Option<store::DeliveryStatus>,
                    limit: u32,
                ) -> Result<Vec<store::Delivery>, StoreError> {
                    outbox::list(&self.pool, owner, status, limit).await
                }
                async fn replay_delivery(
                    &self,
                    id: &DeliveryId,
                    owner: Option<&UserId>,
                    now: Millis,
                ) -> Result<bool, StoreError> {
                    outbox::replay(&self.pool, id, owner, now).await
                }
                async fn prune_events(&self, before: Millis) -> Result<u64, StoreError> {
                    outbox::prune(&self.pool, before).await
                }
                async fn session_events(&self, session: &SessionId) -> Result<Vec<store::StoredEvent>, StoreError> {
                    outbox::of_session(&self.pool, session).await
                }
                async fn ask_delivery(
                    &self,
                    approval: &ApprovalId,
                    target: &str,
                ) -> Result<Option<store::Delivery>, StoreError> {
                    outbox::ask_delivery(&self.pool, approval, target).await
                }
                async fn disable_webhook(&self, name: &str, reason: &str, at: Millis) -> Result<(), StoreError> {
                    outbox::disable_webhook(&self.pool, name, reason, at).await
                }
                async fn enable_webhook(&self, name: &str) -> Result<bool, StoreError> {
                    outbox::enable_webhook(&self.pool, name).await
                }
                async fn disabled_webhooks(&self) -> Result<Vec<store::DisabledWebhook>, StoreError> {
                    outbox::disabled_webhooks(&self.pool).await
                }
            }
        };
    };
}

pub(crate) use impl_store;
