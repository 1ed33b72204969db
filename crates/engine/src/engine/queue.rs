//! A session's message queue (issue 16, seed 002's queue): a prompt sent with
//! `queue: true` while a run is going waits in the store instead of being refused, and
//! runs, in order, once the runs before it have settled.
//!
//! * **Durable and bounded.** Each queued prompt is a row (`queued_messages`), at most
//!   [`MAX_QUEUED`] per session (`queue_full` past it), with the prompt size limit of any
//!   prompt, and across all of a user's sessions at most `caps.max_queued` prompts and
//!   `caps.max_queued_bytes` of text (`user_queue_full`; see [`crate::caps`]). The
//!   session's state carries the queue (`state.queue`), and every change is a
//!   `session.queue` frame, so every view shows it live and the hub can tell a message
//!   taken (`messages.processed`) from one removed (`message.deleted`). A queued
//!   prompt's or steer's files are bound to the session when it is queued (so they
//!   are kept while it waits, and go with the session), and the run that takes it
//!   puts them in its user message before the text, as for a prompt run at once.
//! * **Exactly once.** A queued prompt keeps its request id: a retry finds it queued, or
//!   finds the run it became. Taking it deletes its row and inserts its run in one
//!   transaction, so of any number of takers (this node's settled run and the reaper,
//!   two nodes after a restart) one starts it, and a crash never loses it between the
//!   two. The taker holds the session's lease, as any prompt does, so on a cluster only
//!   the node that may run the session starts it. The run's user message keeps the
//!   queued message's id.
//! * **When.** A run that settles here — completed, failed or cancelled — has the next
//!   prompt start (see [`RunEnv::run_settled`](crate::run_env::RunEnv::run_settled)).
//!   Stop ([`Runs::abort`]) with prompts waiting pauses the queue first (durably, in
//!   the store): Stop means "stop", and the next prompt starting behind the person's
//!   back was the opposite. A paused queue starts nothing — not when a run settles, not
//!   at start-up, not on the reaper's pass — until [`Runs::resume_queue`] (the web
//!   UI's Resume) or a prompt sent with `queue: true`, which joins the end and lets the
//!   queue go on in order. A run that ends because its
//!   node stops or lost the session leaves the queue to whoever runs the session next:
//!   at start-up, and on every reaper pass, sessions whose queue no run will take (their
//!   run died with a process, or no run is going) start their next prompt.

use super::{Engine, Runs, Wanted, ulid_body};
use crate::error::{EngineError, Result};
use crate::leases::LeaseGuard;
use crate::run_env::Settled;
use crate::session::Loaded;
use crate::store::{QueueInsert, QueueLimits, QueuedPrompt, RunInsert};
use spool_protocol::api::AttachmentInfo;
use spool_protocol::frame::{FrameBody, QueueChange, QueuedMessage};
use spool_protocol::time::now_ms;
use spool_protocol::{AttachmentId, MessageId, SessionId, UserId};
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// Prompts one session's queue holds by default: enough to line up a morning's
/// follow-ups, few enough that a runaway client cannot grow the store without end.
pub const MAX_QUEUED: usize = 32;

/// Sessions one pass over waiting queues looks at.
const WAITING_PASS: u32 = 256;

/// What a prompt became.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Submitted {
    /// A run (new, or the one its request id started before).
    Started(crate::PromptAccepted),
    /// A message in the session's queue (new, or the one its request id queued before).
    Queued(PromptQueued),
}

use spool_protocol::api::PromptQueued;

/// Publishes `queue` as the session's queue, saying what changed (the frame's fold
/// sets the state's queue).
fn announce(loaded: &Loaded, queue: Vec<QueuedMessage>, change: QueueChange, paused: bool) {
    loaded.events.publish_body(FrameBody::Queue { queue, change, paused });
}

impl Runs<'_> {
    /// Lets a paused queue go on (the web UI's Resume): its next prompt starts when no
    /// run is going. A queue that was not paused is left as it is.
    pub async fn resume_queue(&self, owner: &UserId, id: &SessionId) -> Result<()> {
        let loaded = self.engine.load(owner, id).await?;
        {
            let _control = loaded.control.lock().await;
            if !self.engine.inner.store.resume_queue(id).await? {
                return Ok(());
            }
            self.engine.publish_queue(&loaded, QueueChange::Resumed).await?;
        }
        self.engine.inner.env.run_settled(id);
        Ok(())
    }

    /// Removes one of `owner`'s queued messages before a run takes it. Anything else —
    /// another user's message, one a run took already, an id nobody queued — is
    /// `NotFound`, and nothing changes.
    pub async fn delete_queued(&self, owner: &UserId, id: &MessageId) -> Result<()> {
        let not_found = || EngineError::NotFound("message");
        let prompt = self.engine.inner.store.get_queued(id).await?.ok_or_else(not_found)?;
        if &prompt.owner_id != owner {
            return Err(not_found());
        }
        let loaded = self.engine.load(owner, &prompt.session_id).await?;
        // Serialized with a run taking it on this node; on another node the store's
        // delete decides (a prompt taken there is not queued any more).
        let _control = loaded.control.lock().await;
        if !self.engine.inner.store.delete_queued(id).await? {
            return Err(not_found());
        }
        self.engine.publish_queue(&loaded, QueueChange::Deleted { message_id: id.clone() }).await?;
        Ok(())
    }
}

/// Steers one session holds at once (issue 40): more than a person types while one run
/// goes on, few enough that a client cannot flood a run's context.
pub const MAX_STEERS: usize = 8;

/// What a steer became.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Steered {
    /// The user message's id: in the queue until the run takes it, then in the
    /// conversation under the same id.
    pub message_id: MessageId,
    pub request_id: String,
    /// The run that takes it at its next safe boundary; `None` when no run was going
    /// and the steer is an ordinary prompt (queued, starting at once unless paused).
    pub run_id: Option<spool_protocol::RunId>,
}

impl Runs<'_> {
    /// Sends a user message into the session's running run (issue 40): stored as a
    /// steer in the session's queue, the run takes it at its next safe boundary — after
    /// its current model call or tool batch, before the next model call — in one
    /// transaction with its user message, so it lands once, also across a restart. A
    /// steer with no run going, or one the run settles without taking, is a queued
    /// prompt and runs in its queue order. The same request id returns the steer queued
    /// before. Its `files` (the caller's attachments) are checked and bound as a
    /// prompt's, and its user message holds them before its text.
    pub async fn steer(
        &self,
        owner: &UserId,
        id: &SessionId,
        text: String,
        request_id: Option<String>,
        files: Vec<AttachmentId>,
    ) -> Result<Steered> {
        let config = &self.engine.inner.config;
        if text.len() > config.max_prompt_bytes {
            return Err(EngineError::TooLarge {
                code: "prompt_too_large",
                message: format!("the message is {} bytes; the limit is {}", text.len(), config.max_prompt_bytes),
            });
        }
        if text.trim().is_empty() && files.is_empty() {
            return Err(EngineError::invalid("empty_prompt", "the message text is empty"));
        }
        if let Some(r) = &request_id
            && (r.is_empty() || r.len() > super::MAX_REQUEST_ID || !r.bytes().all(|b| b.is_ascii_graphic()))
        {
            return Err(EngineError::invalid(
                "invalid_request_id",
                format!("requestId must be 1 to {} printable ASCII characters", super::MAX_REQUEST_ID),
            ));
        }
        let loaded = self.engine.load(owner, id).await?;
        let control = loaded.control.lock().await;
        let active = loaded.active();
        let running = match &active {
            Some(active) if !self.engine.settles_now(active).await? => Some(active.run_id.clone()),
            _ => None,
        };
        if !files.is_empty() {
            // As for a prompt: a file the session's model cannot read is refused here.
            let choice = loaded.events.read(|s| s.session.model.clone());
            let model = self.engine.inner.env.models.resolve(choice.as_deref()).model.clone();
            self.engine.attachments().check_readable(owner, &files, &*model).await?;
        }
        let files = self.engine.attachments().for_prompt(owner, id, &files).await?;
        let message = QueuedMessage {
            id: MessageId::new(),
            request_id: request_id.unwrap_or_else(|| format!("req_{}", ulid_body())),
            text,
            created_at: now_ms(),
            files,
        };
        let prompt = QueuedPrompt {
            session_id: id.clone(),
            owner_id: owner.clone(),
            message: message.clone(),
            approval_policy: None,
            on_disconnect: crate::OnDisconnect::Continue,
        };
        let caps = &config.caps;
        let limits =
            QueueLimits { per_session: MAX_STEERS, per_owner: caps.max_queued, per_owner_bytes: caps.max_queued_bytes };
        let message = match self.engine.inner.store.queue_steer(&prompt, limits).await? {
            QueueInsert::Queued => {
                if running.is_none() {
                    // An ordinary prompt now: a queue Stop paused goes on, as for any
                    // prompt sent to the queue.
                    self.engine.unpause_for_prompt(id).await?;
                }
                self.engine.publish_queue(&loaded, QueueChange::Added { message_id: message.id.clone() }).await?;
                message
            }
            QueueInsert::Existing(earlier) => earlier.message,
            QueueInsert::Full => {
                return Err(EngineError::TooMany {
                    code: "too_many_steers",
                    message: format!("the session already has {MAX_STEERS} steers waiting for its run to take them"),
                });
            }
            QueueInsert::OwnerFull => return Err(crate::caps::queue_owner_full(caps)),
        };
        drop(control);
        if running.is_none() {
            self.engine.inner.env.run_settled(id);
        }
        Ok(Steered { message_id: message.id, request_id: message.request_id, run_id: running })
    }
}

impl Engine {
    /// Puts a prompt at the end of the session's queue, with its `files` (bound to the
    /// session already); the caller holds the session's control lock and has checked
    /// the prompt.
    pub(crate) async fn enqueue(
        &self,
        loaded: &Arc<Loaded>,
        owner: &UserId,
        wanted: Wanted,
        files: Vec<AttachmentInfo>,
    ) -> Result<PromptQueued> {
        // Never with client tools: `submit` refuses those before they could queue.
        let Wanted { text, request_id, approval_policy, on_disconnect, .. } = wanted;
        let session_id = loaded.events.session_id().clone();
        let message = QueuedMessage {
            id: MessageId::new(),
            request_id: request_id.unwrap_or_else(|| format!("req_{}", ulid_body())),
            text,
            created_at: now_ms(),
            files,
        };
        let prompt = QueuedPrompt {
            session_id: session_id.clone(),
            owner_id: owner.clone(),
            message: message.clone(),
            approval_policy,
            on_disconnect,
        };
        let limit = self.inner.config.max_queued;
        let caps = &self.inner.config.caps;
        let limits =
            QueueLimits { per_session: limit, per_owner: caps.max_queued, per_owner_bytes: caps.max_queued_bytes };
        let queue = match self.inner.store.queue_prompt(&prompt, limits).await? {
            QueueInsert::Queued => {
                self.publish_queue(loaded, QueueChange::Added { message_id: message.id.clone() }).await?
            }
            // Queued by a retry on another node a moment ago: nothing changed here.
            QueueInsert::Existing(earlier) => {
                let queue = self.inner.store.queued_prompts(&session_id).await?;
                let index = queue.iter().position(|q| q.message.id == earlier.message.id).unwrap_or(queue.len());
                return Ok(PromptQueued::at(&earlier.message, index));
            }
            QueueInsert::Full => {
                return Err(EngineError::TooMany {
                    code: "queue_full",
                    message: format!(
                        "the session already has {limit} queued prompts; wait for one to run or remove one"
                    ),
                });
            }
            QueueInsert::OwnerFull => return Err(crate::caps::queue_owner_full(caps)),
        };
        let index = queue.iter().position(|q| q.id == message.id).unwrap_or(queue.len());
        Ok(PromptQueued::at(&message, index))
    }

    /// Publishes the session's queue as the store has it now (another node may have
    /// changed it too), with what changed; returns it.
    pub(crate) async fn publish_queue(&self, loaded: &Loaded, change: QueueChange) -> Result<Vec<QueuedMessage>> {
        let session = loaded.events.session_id();
        let queue: Vec<QueuedMessage> =
            self.inner.store.queued_prompts(session).await?.into_iter().map(|q| q.message).collect();
        let paused = self.inner.store.queue_paused(session).await?;
        announce(loaded, queue.clone(), change, paused);
        Ok(queue)
    }

    /// Stop's first step: with prompts waiting, the session's queue is paused (stored,
    /// then announced) before the run is cancelled, so its settling starts none of them.
    pub(crate) async fn pause_queue_for_stop(&self, loaded: &Loaded) -> Result<()> {
        let _control = loaded.control.lock().await;
        let session = loaded.events.session_id();
        if self.inner.store.queued_prompts(session).await?.is_empty() || self.inner.store.queue_paused(session).await? {
            return Ok(());
        }
        self.inner.store.pause_queue(session, now_ms()).await?;
        self.publish_queue(loaded, QueueChange::Paused).await?;
        Ok(())
    }

    /// A prompt sent with `queue: true` lets a paused queue go on: it joins the end, and
    /// the queue runs in order. The caller holds the control lock.
    pub(crate) async fn unpause_for_prompt(&self, id: &SessionId) -> Result<()> {
        self.inner.store.resume_queue(id).await?;
        Ok(())
    }

    /// Starts the session's next queued prompt if nothing runs it now and this node may
    /// (see the module doc). Quietly does nothing when there is nothing to do or
    /// another node has the session.
    pub(crate) async fn start_queued(&self, id: &SessionId) -> Result<()> {
        let Some(session) = self.inner.store.get_session(id).await? else { return Ok(()) };
        let loaded = self.load(&session.owner_id, id).await?;
        let control = loaded.control.lock().await;
        if self.inner.stopping.load(Ordering::SeqCst) || loaded.active().is_some() {
            return Ok(());
        }
        // A run parked at an approval (on any node: a parked run holds no lease) keeps
        // the queue waiting until it is decided.
        if self.inner.store.interrupted_run(id).await?.is_some() {
            return Ok(());
        }
        // Stop paused it: nothing starts until the person resumes it or sends a prompt.
        if self.inner.store.queue_paused(id).await? {
            return Ok(());
        }
        let mut queue = self.inner.store.queued_prompts(id).await?.into_iter();
        let Some(next) = queue.next() else { return Ok(()) };
        // Over the user's run limit the prompt waits; the reaper's pass tries again.
        if self.active_runs_of(&session.owner_id) >= self.inner.config.max_runs_per_user {
            return Ok(());
        }
        let lease = match LeaseGuard::take(&self.inner.leases, id).await {
            Ok(lease) => lease,
            // Another node runs the session: it takes the queue when its run settles.
            Err(EngineError::SessionBusy(_)) => return Ok(()),
            Err(e) => return Err(e),
        };
        if self.is_stale(&loaded).await? {
            drop((control, lease));
            self.forget_stale(id);
            return Box::pin(self.start_queued(id)).await;
        }
        let run = self.new_run(&loaded, next.message.request_id.clone());
        // The queued message keeps its id as the run's user message, and its files.
        let mut prompt = self.prompt_message(&run, next.message.id.clone(), next.message.text.clone());
        super::runs::with_files(&mut prompt.message, next.message.files.clone());
        // Held to the lease just taken: a node that lost it meanwhile takes nothing.
        let store = self.inner.store.fenced(lease.fence().clone());
        let Some(taken) = store.take_queued(&next.message.id, &run, &prompt).await? else {
            // Removed (or taken elsewhere) since it was read: the next one, if any.
            drop((control, lease));
            return Box::pin(self.start_queued(id)).await;
        };
        let run_id = match &taken {
            RunInsert::Created => run.id.clone(),
            RunInsert::Existing(earlier) => earlier.id.clone(),
        };
        let change = QueueChange::Taken { message_ids: vec![next.message.id.clone()], run_id };
        // The run is stored: it starts even if the queue cannot be read back.
        if let Err(error) = self.publish_queue(&loaded, change.clone()).await {
            tracing::warn!(session = %id, %error, "cannot read the queue back; showing it as read before");
            announce(&loaded, queue.map(|q| q.message).collect(), change, false);
        }
        if let RunInsert::Existing(_) = taken {
            // A prompt with its request id ran already (sent again without `queue`):
            // nothing new starts for it, and the queue goes on.
            drop((control, lease));
            return Box::pin(self.start_queued(id)).await;
        }
        let QueuedPrompt { message, approval_policy, on_disconnect, .. } = next;
        let wanted =
            Wanted { text: message.text, request_id: None, approval_policy, on_disconnect, client_tools: Vec::new() };
        self.launch(&loaded, run, wanted, lease, prompt);
        Ok(())
    }

    /// Starts the next prompt of every session whose queue no run will take: none runs
    /// here, no other node holds its lease, none is parked at an approval. At start-up (the
    /// queue of a run a crash ended) and on every reaper pass (a lost node's, or one that
    /// waited for the user's run limit).
    pub(crate) async fn start_waiting_queues(&self) -> Result<()> {
        for id in self.inner.store.queued_sessions(WAITING_PASS).await? {
            if self.inner.sessions.get(&id).is_some_and(|l| l.active().is_some()) {
                continue;
            }
            // Another node's live lease: it runs the session and takes the queue. This
            // node's own lease with no run here is a crashed predecessor's (one machine
            // keeps its node id), and no obstacle.
            let node = &self.inner.config.node_id;
            let lease = self.inner.store.get_lease(&id).await?;
            if lease.is_some_and(|l| &l.node_id != node && l.expires_at > self.inner.config.clock.now_ms()) {
                continue;
            }
            if let Err(error) = self.start_queued(&id).await {
                tracing::warn!(session = %id, %error, "could not start a queued prompt");
            }
        }
        Ok(())
    }

    /// Starts the next queued prompt of each session whose run settled here, one task
    /// per settlement so one slow session holds up no other. Holds the engine weakly.
    pub(crate) fn spawn_queue_runner(&self, mut settled: Settled) {
        let weak = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            while let Some(session) = settled.recv().await {
                let Some(inner) = weak.upgrade() else { return };
                let engine = Engine { inner };
                tokio::spawn(async move {
                    if let Err(error) = engine.start_queued(&session).await {
                        tracing::warn!(%session, %error, "could not start the next queued prompt");
                    }
                });
            }
        });
    }
}
