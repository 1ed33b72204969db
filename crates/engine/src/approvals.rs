//! Deciding approvals exactly once.
//!
//! The order of checks is seed 003's: the approval exists and belongs to this
//! session/run (else 404) → the requester may decide → it has not expired (410) → a
//! repeated idempotency key gets the first response byte for byte and changes nothing →
//! the store's conditional update `pending → resolved` picks one winner (everyone else
//! gets 409 `already_resolved`) → the winner continues the run from its checkpoint.
//! Rejecting never executes the tool; approving re-checks the rules when the tool is
//! about to run, so a rule flipped to `deny` in the meantime wins.
//!
//! Re-check before acting (seed 003: "reload the resource"): an approving decision
//! re-reads the file a `write` or `edit` would change. If it is no longer the file the
//! person was shown, nothing runs: the approval becomes `superseded`, a new one with a
//! fresh preview asks for the same call (one transaction, so the run is never left
//! without an approval), and the answer is 409 `resource_changed` naming it. This is
//! a response like any other, so an idempotency key replays it. A decided call resumed
//! after a crash is re-checked the same way and asks again instead of writing.
//!
//! A decision answers with a [`DecisionOutcome`]: applied, already resolved, or asked
//! again because the file changed. What that looks like on the wire (status codes,
//! bodies) is the server's; the engine keeps the outcome itself for the idempotency key,
//! and a repeat gets the same outcome, so the server renders the same bytes.
//!
//! What becomes of decided calls after a crash is [`recovery`]'s.

use crate::error::{EngineError, Result};
use crate::leases::{LeaseGuard, Leases};
use crate::run::{Checkpoint, Resolution, RunTask};
use crate::run_env::RunEnv;
use crate::session::{ActiveHandle, Loaded, READ_YOUR_WRITES};
use crate::store::{DecidedCall, IdempotencyClaim, Store, Supersede};
use crate::{Inspected, Tool};
use serde::{Deserialize, Serialize};
use spool_protocol::frame::{ActiveRun, FrameBody};
use spool_protocol::time::now_ms;
use spool_protocol::*;
use std::sync::Arc;
use std::time::Duration;

mod live;
mod recovery;

pub(crate) use live::{AskingCall, CallAsker, Waiters, end_orphaned};
pub(crate) use recovery::{log_released, sort_decided};

/// A person's decision as the API receives it.
#[derive(Clone, Debug)]
pub struct DecisionInput {
    pub decision: Decision,
    pub message: Option<String>,
    pub idempotency_key: Option<String>,
    /// With `always` on a command: the patterns of the offered option the person
    /// chose (`alwaysOptions` in the payload). `None`: the exact command.
    pub patterns: Option<Vec<String>>,
    /// How the decision came when it was not a person in a client: `push` (a
    /// notification's action), `link` (a chat-ops decision link) or `timeout` (the
    /// rule's `on_timeout`). Shown as `lastApproval.via`.
    pub via: Option<&'static str>,
}

impl DecisionInput {
    /// A decision with nothing else: no message, no key, no patterns.
    pub fn plain(decision: Decision) -> Self {
        Self { decision, message: None, idempotency_key: None, patterns: None, via: None }
    }
}

/// Where the decision was addressed: a session's approval, a run's interrupt, or the
/// approval by its id alone (the gate, OpenCode's v2 permission reply and its
/// questions, whose routes name no session or run).
#[derive(Clone, Debug)]
pub enum DecisionTarget {
    Session(SessionId),
    Run(RunId),
    Approval,
}

const MAX_MESSAGE: usize = 4096;
const MAX_KEY: usize = 128;
/// How long a repeat waits for the first request with its key to finish.
const IN_PROGRESS_WAIT: Duration = Duration::from_secs(30);
/// With a shared store, a claim still without a response after this long belongs to a
/// request whose node died: deciding takes milliseconds, not minutes.
const ABANDONED_CLAIM: time::Millis = 2 * 60 * 1000;

/// What became of a decision. Kept for its idempotency key (see [`DecisionOutcome::kept`]):
/// a repeat with the key gets this again and changes nothing.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum DecisionOutcome {
    /// This decision won: the approval is resolved and the run goes on.
    Applied { approval_id: ApprovalId, run_id: RunId, decision: Decision },
    /// Someone decided first, or the approval expired or was cancelled meanwhile.
    AlreadyResolved,
    /// An approving decision found the file changed since the person was shown it:
    /// nothing ran, and `replacement` asks again with a preview against the file as it
    /// is now. `message` says so in words a person can read.
    ResourceChanged { message: String, replacement: ApprovalId },
}

impl DecisionOutcome {
    /// The outcome as the store keeps it for an idempotency key: its JSON (tagged
    /// `outcome`).
    fn kept(&self) -> String {
        serde_json::to_string(self).expect("plain data serializes")
    }

    /// The outcome kept for an idempotency key, also from a record an older version
    /// wrote: the HTTP body it answered with (`{approvalId, runId, decision, status}`
    /// when applied, `{error: {code, message, approvalId?}}` when not).
    fn from_kept(kept: &str) -> Result<Self> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Kept {
            Outcome(DecisionOutcome),
            Applied {
                #[serde(rename = "approvalId")]
                approval_id: ApprovalId,
                #[serde(rename = "runId")]
                run_id: RunId,
                decision: Decision,
            },
            Refused {
                error: Refused,
            },
        }
        #[derive(Deserialize)]
        struct Refused {
            code: String,
            message: String,
            #[serde(rename = "approvalId")]
            approval_id: Option<ApprovalId>,
        }
        let kept: Kept = serde_json::from_str(kept).map_err(|e| {
            EngineError::Store(crate::StoreError::Backend(format!("unreadable idempotency record: {e}")))
        })?;
        Ok(match kept {
            Kept::Outcome(outcome) => outcome,
            Kept::Applied { approval_id, run_id, decision } => Self::Applied { approval_id, run_id, decision },
            Kept::Refused { error: Refused { code, message, approval_id: Some(replacement) } }
                if code == "resource_changed" =>
            {
                Self::ResourceChanged { message, replacement }
            }
            Kept::Refused { .. } => Self::AlreadyResolved,
        })
    }
}

/// The approvals of this node's sessions: deciding them exactly once, expiring and
/// cancelling them, and continuing the runs they parked. An owned service: it holds the
/// runs' context (to continue a run) and the leases (to take a session's lease for the
/// winner), and is handed the loaded session by the engine, which alone loads sessions.
pub(crate) struct Approvals {
    env: Arc<RunEnv>,
    leases: Arc<Leases>,
}

/// A decision that passed `decide`'s checks (not expired, its `always` patterns
/// offered), with the approval and checkpoint it is about, for `apply`.
struct Checked {
    approval: Approval,
    checkpoint: serde_json::Value,
    input: DecisionInput,
    always: Vec<PermissionRule>,
}

impl Approvals {
    pub fn new(env: Arc<RunEnv>, leases: Arc<Leases>) -> Self {
        Self { env, leases }
    }

    /// Refuses a decision whose message or idempotency key breaks the limits, before
    /// anything is looked up.
    pub fn check(input: &DecisionInput) -> Result<()> {
        if input.message.as_ref().is_some_and(|m| m.len() > MAX_MESSAGE) {
            return Err(EngineError::invalid(
                "invalid_message",
                format!("message must be at most {MAX_MESSAGE} bytes"),
            ));
        }
        if let Some(k) = &input.idempotency_key
            && (k.is_empty() || k.len() > MAX_KEY || !k.bytes().all(|b| b.is_ascii_graphic()))
        {
            return Err(EngineError::invalid(
                "invalid_idempotency_key",
                format!("idempotencyKey must be 1 to {MAX_KEY} printable ASCII characters"),
            ));
        }
        Ok(())
    }

    /// The approval `id` with its checkpoint, when it is `owner`'s and addressed at
    /// `target`; anything else is `NotFound`, exactly like a missing one.
    pub async fn find(
        &self,
        owner: &UserId,
        target: &DecisionTarget,
        id: &ApprovalId,
    ) -> Result<(Approval, serde_json::Value)> {
        match self.env.store.get_approval(id).await? {
            Some((a, c))
                if &a.owner_id == owner
                    && match target {
                        DecisionTarget::Session(s) => &a.session_id == s,
                        DecisionTarget::Run(r) => &a.run_id == r,
                        DecisionTarget::Approval => true,
                    } =>
            {
                Ok((a, c))
            }
            _ => Err(EngineError::NotFound("approval")),
        }
    }

    /// Applies a decision to `approval` (found with [`find`](Self::find)) of the loaded
    /// session. See the module docs for the order of checks.
    pub async fn decide(
        &self,
        loaded: &Arc<Loaded>,
        owner: &UserId,
        approval: Approval,
        checkpoint: serde_json::Value,
        input: DecisionInput,
    ) -> Result<DecisionOutcome> {
        let store = self.env.store.clone();
        check_kind(&approval, &input.decision)?;
        // Expired, or past its time with the timer not yet run: either way it is gone.
        if approval.status == ApprovalStatus::Expired {
            return Err(expired(&approval));
        }
        if approval.status == ApprovalStatus::Pending && self.env.clock.now_ms() >= approval.expires_at {
            self.expire(loaded, &approval.id).await?;
            return Err(expired(&approval));
        }
        let always = self.always_rules(&approval, &checkpoint, &input)?;
        let scope = format!("approval:{}", approval.id);
        let key = input.idempotency_key.clone();
        let checked = Checked { approval, checkpoint, input, always };
        let Some(key) = key else {
            return self.apply(loaded, Some(owner), checked).await;
        };
        let deadline = tokio::time::Instant::now() + IN_PROGRESS_WAIT;
        loop {
            match store.claim_idempotency(&scope, &key, self.env.clock.now_ms()).await? {
                IdempotencyClaim::Done(kept) => return DecisionOutcome::from_kept(&kept),
                IdempotencyClaim::Claimed => break,
                IdempotencyClaim::InProgress if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                IdempotencyClaim::InProgress => {
                    return Err(EngineError::Conflict {
                        code: "request_in_progress",
                        message: "a request with this idempotency key is still being processed; retry".into(),
                    });
                }
            }
        }
        let result = self.apply(loaded, Some(owner), checked).await;
        match &result {
            Ok(outcome) => store.complete_idempotency(&scope, &key, &outcome.kept()).await?,
            // No response to keep: let a retry run it again.
            Err(_) => store.release_idempotency(&scope, &key).await?,
        }
        result
    }

    /// The session rules an `always` decision adds: for a command, the patterns of the
    /// offered option the person chose, or of the first (the exact command) when they
    /// named none; for any other tool, the tool itself. Patterns that were not offered,
    /// or patterns with another decision, are refused before anything is decided.
    fn always_rules(
        &self,
        approval: &Approval,
        checkpoint: &serde_json::Value,
        input: &DecisionInput,
    ) -> Result<Vec<PermissionRule>> {
        let allow = |pattern: &str| PermissionRule::new(&approval.tool, pattern, PermissionAction::Allow);
        // A guardrail's `always` lifts its limit for the run: no rule is added.
        if input.decision != Decision::Always || approval.is_guardrail() {
            return match input.patterns {
                Some(_) => {
                    Err(EngineError::invalid("pattern_not_offered", "patterns go with the decision \"always\" only"))
                }
                None => Ok(Vec::new()),
            };
        }
        let options = match approval.payload.get("alwaysOptions") {
            Some(options) => Some(serde_json::from_value::<Vec<AlwaysOption>>(options.clone()).map_err(|e| {
                EngineError::Store(crate::StoreError::Backend(format!("unreadable alwaysOptions: {e}")))
            })?),
            // Asked before approvals offered options: the same options now, so an old
            // card's "always" never allows all of a command-running tool either.
            None => self.always_options_now(approval, checkpoint),
        };
        let Some(options) = options else {
            return match &input.patterns {
                Some(_) => Err(EngineError::invalid(
                    "pattern_not_offered",
                    format!(
                        "this {} approval offers no patterns: \"always\" allows the tool in this session",
                        approval.tool
                    ),
                )),
                None => Ok(vec![allow("*")]),
            };
        };
        let chosen = match &input.patterns {
            None => options.iter().find(|o| o.exact).ok_or_else(|| {
                EngineError::invalid(
                    "pattern_not_offered",
                    "this command holds what looks like a secret, so it cannot be allowed for later; approve it once",
                )
            })?,
            Some(patterns) => {
                let mut wanted = patterns.clone();
                wanted.sort();
                wanted.dedup();
                options
                    .iter()
                    .find(|o| {
                        let mut offered = o.patterns.clone();
                        offered.sort();
                        offered.dedup();
                        offered == wanted
                    })
                    .ok_or_else(|| {
                        let offered: Vec<String> = options.iter().map(|o| format!("{:?}", o.patterns)).collect();
                        EngineError::invalid(
                            "pattern_not_offered",
                            format!(
                                "the patterns {patterns:?} are not one of the choices this approval offers for \"always\": {}",
                                offered.join(", ")
                            ),
                        )
                    })?
            }
        };
        Ok(chosen.patterns.iter().map(|p| allow(p)).collect())
    }

    /// The options the approval's tool offers for its pending call today, under the
    /// server's rules (for an approval stored without them).
    fn always_options_now(&self, approval: &Approval, checkpoint: &serde_json::Value) -> Option<Vec<AlwaysOption>> {
        let tool = self.env.tools.get(&approval.tool)?;
        let checkpoint: Checkpoint = serde_json::from_value(checkpoint.clone()).ok()?;
        let options = tool.always_options(&checkpoint.pending.args)?;
        Some(spool_protocol::approval::offerable(&self.env.settings.rules, &approval.tool, options))
    }

    /// Releases idempotency claims older than [`ABANDONED_CLAIM`] that never got a
    /// response, so a retry with the key runs its request again. Single-process servers
    /// release them all at start-up instead.
    pub async fn release_abandoned_claims(&self) -> Result<()> {
        log_released(self.env.store.release_open_claims(self.env.clock.now_ms() - ABANDONED_CLAIM).await?);
        Ok(())
    }

    /// The conditional update and, for the winner, the continuation of the run.
    /// `owner`: the person deciding; `None` for a rule's timeout deciding (see
    /// [`expire`](Self::expire)), which goes the same way so exactly one of them wins.
    async fn apply(&self, loaded: &Arc<Loaded>, owner: Option<&UserId>, checked: Checked) -> Result<DecisionOutcome> {
        let Checked { approval, checkpoint, input, always } = checked;
        if approval.is_live_ask() {
            // A timeout never decides a live ask (`expire` ends it instead).
            let Some(owner) = owner else { return Ok(DecisionOutcome::AlreadyResolved) };
            return self.apply_live(loaded, owner, approval, input).await;
        }
        let store = self.env.store.clone();
        let _control = loaded.control.lock().await;
        // The winner continues the run here, so this node must be able to run the
        // session: take its lease first (a parked run holds none). Busy means another
        // node took it to continue the run: this decision was too late.
        let lease = match self.take_lease(&approval.session_id).await {
            Ok(lease) => lease,
            Err(EngineError::SessionBusy(_)) => return Ok(DecisionOutcome::AlreadyResolved),
            Err(e) => return Err(e),
        };
        // Only a pending approval can still be won; one that is not will never be again.
        if approval.status != ApprovalStatus::Pending {
            return Ok(DecisionOutcome::AlreadyResolved);
        }
        let checkpoint: Checkpoint = serde_json::from_value(checkpoint)
            .map_err(|e| EngineError::Store(crate::StoreError::Backend(format!("unreadable checkpoint: {e}"))))?;
        if input.decision.approves()
            && let Some(changed) = self.changed_target(loaded, &checkpoint).await
        {
            let path = changed.now.resource.path.clone();
            let asked = self.reask(loaded, &approval, ApprovalStatus::Pending, owner, checkpoint, changed);
            return Ok(match asked.await? {
                Some(new) => resource_changed(&path, &new.id),
                None => DecisionOutcome::AlreadyResolved,
            });
        }
        let now = self.env.clock.now_ms();
        let won = store
            .settle_approval(
                &approval.id,
                ApprovalStatus::Resolved,
                Some(&input.decision),
                input.message.as_deref(),
                owner,
                now,
            )
            .await?;
        if !won {
            return Ok(DecisionOutcome::AlreadyResolved);
        }
        self.env.metrics.approval_waited(now - approval.created_at);
        if !always.is_empty() {
            // From now on calls like this one are allowed in this session: the chosen
            // command patterns, or the tool itself (see `always_rules`).
            let _record = loaded.record.lock().await;
            let mut session = loaded.events.read(|s| s.session.clone());
            session.permissions.extend(always);
            session.updated_at = now;
            store.update_session(&session).await?;
            // A frame, so every node's view (and every client) has the new rule.
            loaded.publish_session(session);
        }
        let resolution = resolution(&input.decision, input.message.clone(), owner.is_some(), &checkpoint);
        let mut run = store.get_run(&approval.run_id).await?.ok_or(EngineError::NotFound("run"))?;
        run.status = RunStatus::Running;
        run.updated_at = now;
        // Held to the decision's lease, as the continuation's writes will be.
        store.fenced(lease.fence().clone()).update_run(&run).await?;
        let handle = ActiveHandle::new(run.id.clone());
        loaded.set_active(Some(handle.clone()));
        publish_resolution(loaded, &approval, input.decision.label(), owner, input.message.clone(), &run, now, input.via);
        let outcome = DecisionOutcome::Applied {
            approval_id: approval.id.clone(),
            run_id: run.id.clone(),
            decision: input.decision,
        };
        let held = lease.keep();
        let (env, loaded) = (self.env.clone(), loaded.clone());
        let task = RunTask::resume(env, loaded, run, handle, (checkpoint, resolution), approval.id, held);
        tokio::spawn(task.execute());
        Ok(outcome)
    }

    /// Resumes a run whose approving decision was acknowledged before a crash and whose
    /// tool never started: the same continuation the decision would have spawned.
    /// `loaded` is the approval's session.
    pub async fn resume_decided(&self, loaded: &Arc<Loaded>, decided: DecidedCall) -> Result<()> {
        let DecidedCall { approval, checkpoint, .. } = decided;
        let checkpoint: Checkpoint = serde_json::from_value(checkpoint)
            .map_err(|e| EngineError::Store(crate::StoreError::Backend(format!("unreadable checkpoint: {e}"))))?;
        let decision = approval.decision.clone().ok_or(EngineError::NotFound("decision"))?;
        let _control = loaded.control.lock().await;
        let lease = self.take_lease(&approval.session_id).await?;
        if let Some(changed) = self.changed_target(loaded, &checkpoint).await {
            tracing::warn!(approval = %approval.id, path = %changed.now.resource.path, "the file of a decided call changed before it ran; asking again");
            // The lease is given back when it drops: a parked run holds none.
            self.reask(loaded, &approval, ApprovalStatus::Resolved, None, checkpoint, changed).await?;
            return Ok(());
        }
        let run = self.env.store.get_run(&approval.run_id).await?.ok_or(EngineError::NotFound("run"))?;
        tracing::warn!(run = %run.id, approval = %approval.id, "resuming a decided call that a crash kept from starting");
        let handle = ActiveHandle::new(run.id.clone());
        loaded.set_active(Some(handle.clone()));
        let active = ActiveRun { run_id: run.id.clone(), request_id: run.request_id.clone(), status: run.status };
        loaded.events.publish(|s| {
            s.status = SessionStatus::Busy;
            s.active_run = Some(active);
            Some(FrameBody::State { state: Box::new(s.clone()) })
        });
        let resolution = resolution(&decision, approval.message.clone(), approval.actor.is_some(), &checkpoint);
        let held = lease.keep();
        let (env, loaded) = (self.env.clone(), loaded.clone());
        tokio::spawn(RunTask::resume(env, loaded, run, handle, (checkpoint, resolution), approval.id, held).execute());
        Ok(())
    }

    /// The pending call's file as it is now, with its tool, when it is no longer the file
    /// the approval was asked on. `None` when nothing was recorded (a tool that changes no
    /// single file, or a checkpoint older than the check) or nothing changed. The call is
    /// looked at as it was asked: a `fill` is checked against the file the person saw.
    async fn changed_target(&self, loaded: &Loaded, checkpoint: &Checkpoint) -> Option<Changed> {
        let asked = checkpoint.resource.as_ref()?;
        let tool = self.env.tools.get(&checkpoint.pending.name)?;
        // Its own token: a decision is not part of the run, and looking changes nothing.
        let ctx = self.env.tool_context(loaded, tokio_util::sync::CancellationToken::new());
        let now = tool.inspect(&checkpoint.pending.args, &ctx).await?;
        (now.resource.fingerprint != asked.fingerprint).then_some(Changed { tool, now })
    }

    /// Asks again for the call parked at `old`, whose file changed: `old` (still in status
    /// `from`, its call not started) becomes `superseded` and a new pending approval with
    /// the preview of `changed` — whose fingerprint the new checkpoint keeps — takes its
    /// place, with the run `interrupted`, in one transaction. Then the views learn it:
    /// one state frame (the old card gone, the new one there), `approval_resolved`
    /// (`superseded`) and `approval_requested`. `None` when `old` had moved on. The
    /// caller holds the session's control lock.
    async fn reask(
        &self,
        loaded: &Arc<Loaded>,
        old: &Approval,
        from: ApprovalStatus,
        actor: Option<&UserId>,
        mut checkpoint: Checkpoint,
        changed: Changed,
    ) -> Result<Option<Approval>> {
        let store = &self.env.store;
        let mut run = store.get_run(&old.run_id).await?.ok_or(EngineError::NotFound("run"))?;
        // Later than the old one, always: "the latest approval of a run" must name it.
        let now = self.env.clock.now_ms().max(old.created_at + 1);
        // The new approval waits as the rules say now, like any new ask (a client
        // tool changes no file, so its rules never come here).
        let session_rules = loaded.events.read(|s| s.session.permissions.clone());
        let subject = changed.tool.subject(&checkpoint.pending.args);
        let verdict = spool_protocol::approval::evaluate_call_verdict(
            &self.env.settings.rules,
            &session_rules,
            &checkpoint.pending.name,
            &subject,
        );
        let approval = crate::run::new_approval(
            (self.env.settings.approval_ttl, verdict.wait),
            &self.env.settings.rules,
            &*changed.tool,
            &run,
            &checkpoint.pending,
            Some(&changed.now),
            now,
        );
        checkpoint.resource = Some(changed.now.resource);
        // The new approval's `approval_requested` below is the run's next event.
        checkpoint.sequence = loaded.events.next_run_sequence(&run.id, READ_YOUR_WRITES).await;
        run.status = RunStatus::Interrupted;
        run.updated_at = now;
        let checkpoint = serde_json::to_value(&checkpoint).expect("plain data serializes");
        let superseded = Supersede { id: &old.id, from, actor, at: now };
        if !store.supersede_approval(&superseded, &run, &approval, &checkpoint).await? {
            return Ok(None);
        }
        let status = ApprovalStatus::Superseded.as_str();
        let last = LastApproval { id: old.id.clone(), decision: status.into(), actor: actor.cloned(), at: now, via: None };
        let active = ActiveRun { run_id: run.id.clone(), request_id: run.request_id.clone(), status: run.status };
        let shown = approval.clone();
        loaded.events.publish(move |s| {
            s.pending_approvals.retain(|a| a.id != old.id);
            s.pending_approvals.push(shown);
            s.last_approval = Some(last);
            s.status = SessionStatus::Busy;
            s.active_run = Some(active);
            Some(FrameBody::State { state: Box::new(s.clone()) })
        });
        // After the view shows the new approval pending: a parked handle is held only
        // while it does (see `Loaded::active`).
        let mut handle = ActiveHandle::new(run.id.clone());
        handle.interrupted = Some(approval.id.clone());
        handle.finished.cancel();
        loaded.set_active(Some(handle));
        let loop_event =
            |event| FrameBody::LoopEvent { run_id: run.id.clone(), message_index: None, message_id: None, event };
        loaded.events.publish_body(loop_event(AgentEvent::ApprovalResolved {
            approval_id: old.id.clone(),
            decision: status.into(),
            actor: actor.cloned(),
            message: None,
        }));
        loaded.events.publish_body(loop_event(AgentEvent::ApprovalRequested { approval: Box::new(approval.clone()) }));
        self.env.arm_expiry(&approval);
        Ok(Some(approval))
    }

    /// Expires a pending approval. No-op when it is not pending any more.
    ///
    /// What happens is its rule's `onTimeout` (kept in the payload by `new_approval`):
    /// `deny` rejects the call with a message, so the model is told nobody answered and
    /// the run goes on; `allow` approves it once (the rules are checked again before it
    /// runs). Both go through [`apply`](Self::apply) with no actor, the path a person's
    /// decision takes, so the lease and the store's conditional update let exactly one
    /// of a person and the timeout win. Otherwise (`wait`, which expires at the TTL, or
    /// no rule) the approval expires and its run is cancelled, saying why. A client
    /// call (its own TTL) and a live ask (its run never parked) always expire.
    ///
    /// The plan's `LastApproval.via: "timeout"` belongs to issue 41's schema work
    /// (WP1), not built yet; until then a timeout's decision is the one without an actor.
    pub async fn expire(&self, loaded: &Arc<Loaded>, approval_id: &ApprovalId) -> Result<()> {
        if let Some((approval, checkpoint)) = self.env.store.get_approval(approval_id).await?
            && approval.status == ApprovalStatus::Pending
            && let Some(decision) = timeout_decision(&approval)
        {
            let owner = approval.owner_id.clone();
            let checked = Checked { approval, checkpoint, input: decision, always: Vec::new() };
            let outcome = self.apply(loaded, None, checked).await?;
            tracing::info!(approval = %approval_id, owner = %owner, ?outcome, "a rule's timeout decided an approval");
            return Ok(());
        }
        let _control = loaded.control.lock().await;
        let client_call = match self.env.store.get_approval(approval_id).await? {
            Some((approval, _)) if approval.is_client_call() => Some(approval.tool),
            _ => None,
        };
        let error = match client_call {
            Some(tool) => RunError {
                code: "client_tool_expired".into(),
                message: format!("the client did not return the result of {tool} in time; the run was cancelled"),
            },
            None => RunError {
                code: "approval_expired".into(),
                message: "the approval expired before anyone decided; the run was cancelled".into(),
            },
        };
        self.end_interrupted(loaded, approval_id, ApprovalStatus::Expired, error).await
    }

    /// Ends a run parked at `approval_id`: the approval moves to `status` (if it is still
    /// pending — otherwise someone else already acted and nothing happens) and the run is
    /// cancelled with `error`. A live ask (see [`live`]) ends alone: its run is still
    /// running, and its call reads cancel. The caller holds the session's control lock.
    async fn end_interrupted(
        &self,
        loaded: &Arc<Loaded>,
        approval_id: &ApprovalId,
        status: ApprovalStatus,
        error: RunError,
    ) -> Result<()> {
        let store = self.env.store.clone();
        let now = self.env.clock.now_ms();
        if !store.settle_approval(approval_id, status, None, None, None, now).await? {
            return Ok(());
        }
        let Some((approval, checkpoint)) = store.get_approval(approval_id).await? else {
            return Ok(());
        };
        if approval.is_live_ask() {
            // Its run never parked: only the call waiting for it hears that it ended.
            self.env.live.wake(&approval.id, crate::LiveAnswer::Cancel);
            if let Some(run) = store.get_run(&approval.run_id).await? {
                publish_resolution(loaded, &approval, status.as_str(), None, None, &run, now, None);
            }
            return Ok(());
        }
        let Some(mut run) = store.get_run(&approval.run_id).await? else {
            return Ok(());
        };
        run.status = RunStatus::Cancelled;
        run.updated_at = now;
        run.ended_at = Some(now);
        run.error = Some(error);
        store.update_run(&run).await?;
        self.env.metrics.run_settled(RunStatus::Cancelled);
        publish_resolution(loaded, &approval, status.as_str(), None, None, &run, now, None);
        // The parked call never runs: end it (and the prompt's timing) in every view.
        crate::run::end_parked_calls(&self.env, loaded, &run, checkpoint).await;
        let run_id = run.id.clone();
        let loop_event =
            |event| FrameBody::LoopEvent { run_id: run_id.clone(), message_index: None, message_id: None, event };
        loaded.events.publish_body(loop_event(AgentEvent::AgentEnd {
            status: "cancelled".into(),
            usage: run.usage,
            error: run.error.clone(),
        }));
        loaded.set_active(None);
        loaded.publish_idle();
        loaded.events.publish_body(loop_event(AgentEvent::AgentSettled {}));
        // The session's queue goes on once the caller lets go of the control lock.
        self.env.run_settled(&run.session_id);
        Ok(())
    }

    /// Aborts the run this node has of a loaded session, if any, and waits until it is
    /// settled. A run parked at an approval is cancelled together with its approval,
    /// which is why aborting lives here.
    pub async fn abort(&self, loaded: &Arc<Loaded>) -> Result<Option<RunId>> {
        let _control = loaded.control.lock().await;
        self.abort_held(loaded).await
    }

    /// [`abort`](Self::abort) for a caller that holds the session's control lock: a
    /// prompt that interrupts the run starts its own before anything else can.
    pub(crate) async fn abort_held(&self, loaded: &Arc<Loaded>) -> Result<Option<RunId>> {
        loop {
            let Some(active) = loaded.active() else {
                return Ok(None);
            };
            if let Some(approval_id) = &active.interrupted {
                self.end_interrupted(
                    loaded,
                    approval_id,
                    ApprovalStatus::Cancelled,
                    RunError {
                        code: "aborted".into(),
                        message: "the run was aborted while waiting for approval".into(),
                    },
                )
                .await?;
                return Ok(Some(active.run_id));
            }
            active.cancel.cancel();
            active.finished.cancelled().await;
            // The task may have parked the run at an approval just before it saw the
            // cancellation: then cancel the approval too.
            match loaded.active() {
                Some(now) if now.run_id == active.run_id && now.interrupted.is_some() => continue,
                _ => return Ok(Some(active.run_id)),
            }
        }
    }

    /// Every approval of `owner` still waiting for a decision, oldest first (OpenCode's
    /// `GET /permission` lists them across sessions).
    pub async fn pending_of(&self, owner: &UserId) -> Result<Vec<Approval>> {
        let mut pending = self.env.store.all_pending_approvals().await?;
        pending.retain(|a| &a.owner_id == owner && a.status == ApprovalStatus::Pending);
        pending.sort_by(|a, b| a.created_at.cmp(&b.created_at).then_with(|| a.id.cmp(&b.id)));
        Ok(pending)
    }

    /// One approval of `owner`, in whatever state it is (OpenCode answers a permission
    /// by its id alone).
    pub async fn get(&self, owner: &UserId, id: &ApprovalId) -> Result<Approval> {
        match self.env.store.get_approval(id).await? {
            Some((approval, _)) if &approval.owner_id == owner => Ok(approval),
            _ => Err(EngineError::NotFound("approval")),
        }
    }

    /// Takes the session's lease for the decision's winner (see [`LeaseGuard::take`]).
    async fn take_lease(&self, session: &SessionId) -> Result<LeaseGuard> {
        LeaseGuard::take(&self.leases, session).await
    }
}

/// A pending call's file that is no longer the one its approval was asked on: the tool
/// that looked, and what it found now.
struct Changed {
    tool: Arc<dyn Tool>,
    now: Inspected,
}

/// The decision a rule's timeout makes for `approval` (its payload's `onTimeout`), if
/// any: `deny` a reject with a message saying why, `allow` an approval once (for a
/// `confirm_action` only: a question has no answer to give for the person). Never for
/// a client call or a live ask.
fn timeout_decision(approval: &Approval) -> Option<DecisionInput> {
    if approval.is_client_call() || approval.is_live_ask() {
        return None;
    }
    let then = approval.payload.get("onTimeout").and_then(|v| v.as_str()).and_then(OnTimeout::parse)?;
    let within = approval.payload.get("timeout").and_then(|v| v.as_str()).unwrap_or("its time").to_owned();
    let input = match then {
        OnTimeout::Deny => Some(DecisionInput {
            message: Some(format!("Nobody answered within {within}; the rule says deny")),
            ..DecisionInput::plain(Decision::Reject)
        }),
        OnTimeout::Allow if approval.kind == ApprovalKind::ConfirmAction => Some(DecisionInput::plain(Decision::Once)),
        // A question nobody answered: tell the model, like deny.
        OnTimeout::Allow => Some(DecisionInput {
            message: Some(format!("Nobody answered within {within}")),
            ..DecisionInput::plain(Decision::Reject)
        }),
        OnTimeout::Wait => None,
    };
    input.map(|input| DecisionInput { via: Some("timeout"), ..input })
}

/// How a decision resolves the checkpoint's pending call. `person`: a person decided
/// (else a rule's timeout did, and the model is told that instead).
fn resolution(decision: &Decision, message: Option<String>, person: bool, checkpoint: &Checkpoint) -> Resolution {
    // A guardrail's pause: `once` goes one step further, `always` on for the run.
    if checkpoint.guard.is_some() {
        return match decision {
            Decision::Always => Resolution::Continue(crate::run::GoOn::Always),
            Decision::Reject => Resolution::Rejected { message, person },
            _ => Resolution::Continue(crate::run::GoOn::Once),
        };
    }
    match decision {
        Decision::Reject => Resolution::Rejected { message, person },
        Decision::Once | Decision::Always => Resolution::Approved { args: checkpoint.pending.args.clone() },
        Decision::Fill(args) => Resolution::Approved { args: args.clone() },
        Decision::Output(output) => Resolution::ClientResult(output.clone()),
    }
}

/// Refuses an answer of the wrong kind (400 `wrong_answer_kind`): a client call is
/// answered with its result (`output`) or cancelled (`reject`), and only a client call
/// takes an `output`; a result over the limit is 413 `output_too_large`. A live ask
/// checks its own answers (see [`live`]).
fn check_kind(approval: &Approval, decision: &Decision) -> Result<()> {
    match decision {
        Decision::Output(output) if approval.is_client_call() => crate::client_tools::check_output(output),
        Decision::Output(_) if !approval.is_live_ask() => Err(EngineError::invalid(
            "wrong_answer_kind",
            "\"output\" answers a client tool call; this approval is answered with \"once\", \"always\", \"fill\" or \"reject\"",
        )),
        Decision::Fill(_) | Decision::Output(_) if approval.is_guardrail() => Err(EngineError::invalid(
            "wrong_answer_kind",
            "a guardrail asks whether the run goes on: answer it with \"once\" (one step further), \"always\" (for the rest of the run) or \"reject\" (stop it)",
        )),
        Decision::Once | Decision::Always | Decision::Fill(_) if approval.is_client_call() => {
            Err(EngineError::invalid(
                "wrong_answer_kind",
                format!(
                    "this is a call of the client tool {}: answer it with its result (\"output\") or \"reject\" to cancel it",
                    approval.tool
                ),
            ))
        }
        _ => Ok(()),
    }
}

fn expired(approval: &Approval) -> EngineError {
    if approval.is_client_call() {
        return EngineError::Gone {
            code: "client_tool_expired",
            message: format!("the call of {} ({}) expired; its run was cancelled", approval.tool, approval.id),
        };
    }
    EngineError::Gone {
        code: "approval_expired",
        message: format!("approval {} expired; its run was cancelled", approval.id),
    }
}

/// Removes the approval from the pending list, records `lastApproval`, and publishes
/// the state and an `approval_resolved` event.
#[allow(clippy::too_many_arguments)]
fn publish_resolution(
    loaded: &Loaded,
    approval: &Approval,
    decision: &str,
    actor: Option<&UserId>,
    message: Option<String>,
    run: &Run,
    at: time::Millis,
    via: Option<&'static str>,
) {
    let via = via.map(str::to_owned);
    let last = LastApproval { id: approval.id.clone(), decision: decision.into(), actor: actor.cloned(), at, via };
    let active = (!run.status.is_terminal()).then(|| ActiveRun {
        run_id: run.id.clone(),
        request_id: run.request_id.clone(),
        status: run.status,
    });
    loaded.events.publish(|s| {
        s.pending_approvals.retain(|a| a.id != approval.id);
        s.last_approval = Some(last);
        if active.is_some() {
            s.active_run = active;
        }
        Some(FrameBody::State { state: Box::new(s.clone()) })
    });
    loaded.events.publish_body(FrameBody::LoopEvent {
        run_id: run.id.clone(),
        message_index: None,
        message_id: None,
        event: AgentEvent::ApprovalResolved {
            approval_id: approval.id.clone(),
            decision: decision.into(),
            actor: actor.cloned(),
            message,
        },
    });
}

/// The answer to an approving decision on a file that changed since the approval was
/// asked: nothing ran, and `replacement` asks again.
fn resource_changed(path: &str, replacement: &ApprovalId) -> DecisionOutcome {
    let message = format!(
        "{path:?} changed after this approval was asked, so nothing was written; approval {replacement} asks \
         again with a preview of the change against the file as it is now"
    );
    DecisionOutcome::ResourceChanged { message, replacement: replacement.clone() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids() -> (ApprovalId, RunId) {
        ("per_01jd0000000000000000000001".parse().unwrap(), "run_01jd0000000000000000000002".parse().unwrap())
    }

    #[test]
    fn a_kept_outcome_reads_back_as_itself() {
        let (approval_id, run_id) = ids();
        for outcome in [
            DecisionOutcome::Applied { approval_id: approval_id.clone(), run_id, decision: Decision::Fill(1.into()) },
            DecisionOutcome::AlreadyResolved,
            DecisionOutcome::ResourceChanged { message: "\"a.txt\" changed".into(), replacement: approval_id },
        ] {
            assert_eq!(DecisionOutcome::from_kept(&outcome.kept()).unwrap(), outcome);
        }
    }

    /// Rows an older version kept (the HTTP answer itself) still answer a repeat the same.
    #[test]
    fn an_http_answer_an_older_version_kept_reads_as_its_outcome() {
        let (approval_id, run_id) = ids();
        let applied =
            format!(r#"{{"approvalId":"{approval_id}","runId":"{run_id}","decision":"always","status":"resolved"}}"#);
        assert_eq!(
            DecisionOutcome::from_kept(&applied).unwrap(),
            DecisionOutcome::Applied { approval_id: approval_id.clone(), run_id, decision: Decision::Always }
        );
        let lost = spool_protocol::api::error_body("already_resolved", "this approval was already decided");
        assert_eq!(DecisionOutcome::from_kept(&lost).unwrap(), DecisionOutcome::AlreadyResolved);
        let changed = spool_protocol::api::resource_changed_body("\"a.txt\" changed", approval_id.as_str());
        assert_eq!(
            DecisionOutcome::from_kept(&changed).unwrap(),
            DecisionOutcome::ResourceChanged { message: "\"a.txt\" changed".into(), replacement: approval_id }
        );
    }
}
