//! Live asks: a question a running tool puts to the person (an MCP server's
//! elicitation) while its call goes on.
//!
//! The `question` tool parks its run: the task ends and a decision starts a new one.
//! A live ask cannot, because the server is waiting inside a `tools/call` that parking
//! would cut. So the run stays `running` and the call awaits the answer here. What
//! clients see is what they see for a question: a durable `provide_input` approval
//! (its payload marked `"live": true`, with the asking server, the message and the
//! schema of the fields), its `approval_requested` and, once it ends,
//! `approval_resolved`. It is decided through the same routes, exactly once (the
//! store's conditional update), and the winner wakes the waiting call instead of
//! resuming a run: fill or once → accept (the fields, defaults filled in), reject →
//! decline. Expiry, a stop, the call ending on its own, or a restart that lost the
//! call end it as expired or cancelled, and the call reads cancel.
//!
//! The waiting call listens on this node ([`Waiters`]); with a shared store a decision
//! may be taken on another node, so the call also reads the approval back from the
//! store every [`STORE_POLL`] (one read a second per open ask, and only while one is
//! open: cheaper than telling a one-process server apart).

use super::*;
use crate::{AskPerson, LiveAnswer, LiveAsk};
use serde_json::{Map, json};
use spool_protocol::api::ApprovalPolicy;
use std::collections::HashMap;
use std::sync::Mutex;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

/// The payload key that marks an approval as a live ask.
const LIVE: &str = "live";

/// How often a waiting call reads its ask back from the store.
const STORE_POLL: Duration = Duration::from_secs(1);

/// The checkpoint a live ask is stored with: there is nothing to resume (the call is
/// still running), and it must never read as a run's [`Checkpoint`], so start-up's
/// sorting of decided calls passes over it.
fn live_checkpoint() -> serde_json::Value {
    json!({ LIVE: true })
}

/// The calls on this node waiting for the answer to a live ask, by its approval.
/// A std mutex: nothing awaits while it is held.
#[derive(Default)]
pub(crate) struct Waiters {
    waiting: Mutex<HashMap<ApprovalId, oneshot::Sender<LiveAnswer>>>,
}

impl Waiters {
    fn wait(&self, id: &ApprovalId) -> oneshot::Receiver<LiveAnswer> {
        let (tx, rx) = oneshot::channel();
        self.lock().insert(id.clone(), tx);
        rx
    }

    /// Hands the answer to the call waiting for it here, if one is.
    pub(crate) fn wake(&self, id: &ApprovalId, answer: LiveAnswer) {
        let waiter = self.lock().remove(id);
        if let Some(waiter) = waiter {
            // The call may have stopped waiting meanwhile: then nobody needs it.
            let _ = waiter.send(answer);
        }
    }

    fn forget(&self, id: &ApprovalId) {
        self.lock().remove(id);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ApprovalId, oneshot::Sender<LiveAnswer>>> {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// What a decision answers a live ask with. Refused (nothing settled) when it cannot
/// answer it: `always` means nothing here, and the fields must be an object holding
/// every required one.
pub(crate) fn answer_of(approval: &Approval, decision: &Decision) -> Result<LiveAnswer> {
    let schema = approval.payload.get("fields").cloned().unwrap_or(serde_json::Value::Null);
    match decision {
        Decision::Reject => Ok(LiveAnswer::Decline),
        Decision::Always => Err(EngineError::invalid(
            "decision_not_offered",
            "a server's question is answered (\"fill\" with the fields, or \"once\" for the defaults) or declined \
             (\"reject\"); \"always\" does not apply",
        )),
        Decision::Once => fields(&schema, &Map::new()).map(LiveAnswer::Accept),
        Decision::Fill(given) => match given.as_object() {
            Some(given) => fields(&schema, given).map(LiveAnswer::Accept),
            None => Err(EngineError::invalid("invalid_answer", "\"fill\" takes an object of the fields asked for")),
        },
        Decision::Output(_) => Err(EngineError::invalid(
            "wrong_answer_kind",
            "\"output\" answers a client tool call; a server's question is answered with \"fill\", \"once\" or \"reject\"",
        )),
    }
}

/// The fields the person gave, read against the schema: the schema's own fields only,
/// a default for each one left out, a required one missing refused. A lone `answer`
/// (what every client sends a question) answers a schema of one field. Text where a
/// number or a yes/no is asked (a terminal types text) is read as one.
fn fields(schema: &serde_json::Value, given: &Map<String, serde_json::Value>) -> Result<serde_json::Value> {
    let empty = Map::new();
    let properties = schema.get("properties").and_then(|p| p.as_object()).unwrap_or(&empty);
    let mut given = given.clone();
    if properties.len() == 1
        && !properties.contains_key("answer")
        && let Some(answer) = given.remove("answer")
    {
        let name = properties.keys().next().expect("one property").clone();
        given.insert(name, answer);
    }
    let mut out = Map::new();
    for (name, property) in properties {
        let value = match given.remove(name) {
            Some(serde_json::Value::Null) | None => property.get("default").cloned(),
            Some(value) => Some(typed(property, value)),
        };
        if let Some(value) = value {
            out.insert(name.clone(), value);
        }
    }
    let required = schema.get("required").and_then(|r| r.as_array()).map(Vec::as_slice).unwrap_or_default();
    let missing: Vec<&str> = required.iter().filter_map(|r| r.as_str()).filter(|r| !out.contains_key(*r)).collect();
    if !missing.is_empty() {
        return Err(EngineError::invalid(
            "missing_field",
            format!("the question asks for {}: fill them in, or reject to decline", missing.join(", ")),
        ));
    }
    Ok(serde_json::Value::Object(out))
}

/// `value` as the property's type, when it came as text.
fn typed(property: &serde_json::Value, value: serde_json::Value) -> serde_json::Value {
    let serde_json::Value::String(text) = &value else { return value };
    let text = text.trim();
    match property.get("type").and_then(|t| t.as_str()) {
        Some("integer") => text.parse::<i64>().map(Into::into).unwrap_or(value),
        Some("number") => text.parse::<f64>().ok().and_then(serde_json::Number::from_f64).map_or(value, Into::into),
        Some("boolean") => match text.to_ascii_lowercase().as_str() {
            "true" | "yes" | "y" => true.into(),
            "false" | "no" | "n" => false.into(),
            _ => value,
        },
        _ => value,
    }
}

impl Approvals {
    /// A decision on a live ask: settled exactly once, then the waiting call woken. No
    /// lease is taken and no run resumed: the run never stopped.
    pub(super) async fn apply_live(
        &self,
        loaded: &Arc<Loaded>,
        owner: &UserId,
        approval: Approval,
        input: DecisionInput,
    ) -> Result<DecisionOutcome> {
        if approval.status != ApprovalStatus::Pending {
            return Ok(DecisionOutcome::AlreadyResolved);
        }
        let answer = answer_of(&approval, &input.decision)?;
        let store = &self.env.store;
        let now = self.env.clock.now_ms();
        // What is kept is what the call is answered with, so a node reading it back
        // from the store (see `settled_in_store`) answers the same.
        let decision = match &answer {
            LiveAnswer::Accept(fields) => Decision::Fill(fields.clone()),
            _ => input.decision.clone(),
        };
        let message = input.message.as_deref();
        if !store
            .settle_approval(&approval.id, ApprovalStatus::Resolved, Some(&decision), message, Some(owner), now)
            .await?
        {
            return Ok(DecisionOutcome::AlreadyResolved);
        }
        self.env.metrics.approval_waited(now - approval.created_at);
        let run = store.get_run(&approval.run_id).await?.ok_or(EngineError::NotFound("run"))?;
        publish_resolution(
            loaded,
            &approval,
            input.decision.label(),
            Some(owner),
            input.message.clone(),
            &run,
            now,
            input.via,
        );
        self.env.live.wake(&approval.id, answer);
        Ok(DecisionOutcome::Applied { approval_id: approval.id, run_id: run.id, decision: input.decision })
    }
}

/// Ends a live ask nobody answered (expired, the call or its run stopped): it leaves
/// every view and its call, if one still waits, reads cancel. No-op when it was
/// settled already. Returns whether this ended it.
pub(crate) async fn end_unanswered(env: &RunEnv, loaded: &Loaded, approval: &Approval, status: ApprovalStatus) -> bool {
    let now = env.clock.now_ms();
    match env.store.settle_approval(&approval.id, status, None, None, None, now).await {
        Ok(true) => {}
        Ok(false) => return false,
        Err(error) => {
            tracing::warn!(approval = %approval.id, %error, "could not end a live ask");
            return false;
        }
    }
    env.live.wake(&approval.id, LiveAnswer::Cancel);
    match env.store.get_run(&approval.run_id).await {
        Ok(Some(run)) => publish_resolution(loaded, approval, status.as_str(), None, None, &run, now, None),
        // Without the run, the view still must not show the ask pending.
        _ => {
            loaded.events.publish(|s| {
                s.pending_approvals.retain(|a| a.id != approval.id);
                Some(FrameBody::State { state: Box::new(s.clone()) })
            });
        }
    }
    true
}

/// Cancels the pending live asks whose run is no longer running (the process that ran
/// their call stopped): at start-up for one process, for a lost node's session
/// (`only`) on a shared store. Returns how many it ended.
pub(crate) async fn end_orphaned(store: &dyn Store, only: Option<&SessionId>, now: time::Millis) -> Result<usize> {
    let mut ended = 0;
    for approval in store.all_pending_approvals().await? {
        if !approval.is_live_ask() || only.is_some_and(|s| s != &approval.session_id) {
            continue;
        }
        let running = store.get_run(&approval.run_id).await?.is_some_and(|r| r.status == RunStatus::Running);
        if !running && store.settle_approval(&approval.id, ApprovalStatus::Cancelled, None, None, None, now).await? {
            tracing::warn!(approval = %approval.id, run = %approval.run_id, "cancelled a live ask whose call is gone");
            ended += 1;
        }
    }
    Ok(ended)
}

/// The person behind one running call's [`crate::ToolContext::asker`]: each ask is
/// recorded as a live ask of the call's run and waited for. What is still open when
/// the call ends is cancelled by [`close`](CallAsker::close).
pub(crate) struct CallAsker {
    env: Arc<RunEnv>,
    /// The run's store, its writes held to the run's lease (see `leases.rs`).
    store: Arc<dyn Store>,
    loaded: Arc<Loaded>,
    run_id: RunId,
    call_id: String,
    tool: String,
    policy: ApprovalPolicy,
    cancel: CancellationToken,
    open: Mutex<Vec<Approval>>,
}

/// Who a [`CallAsker`] asks for: the run and call it belongs to.
pub(crate) struct AskingCall {
    /// The run's store: an ask is written as the run's own writes are, held to its lease.
    pub store: Arc<dyn Store>,
    pub run_id: RunId,
    pub call_id: String,
    pub tool: String,
    pub policy: ApprovalPolicy,
    pub cancel: CancellationToken,
}

impl CallAsker {
    pub(crate) fn new(env: Arc<RunEnv>, loaded: Arc<Loaded>, call: AskingCall) -> Self {
        let AskingCall { store, run_id, call_id, tool, policy, cancel } = call;
        Self { env, store, loaded, run_id, call_id, tool, policy, cancel, open: Mutex::new(Vec::new()) }
    }

    /// Cancels every ask of the call still waiting: the call is over, so nobody would
    /// hear the answer.
    pub(crate) async fn close(&self) {
        let open = std::mem::take(&mut *self.open.lock().unwrap_or_else(|p| p.into_inner()));
        for approval in open {
            end_unanswered(&self.env, &self.loaded, &approval, ApprovalStatus::Cancelled).await;
        }
    }

    fn closed(&self, id: &ApprovalId) {
        self.open.lock().unwrap_or_else(|p| p.into_inner()).retain(|a| &a.id != id);
    }

    /// Whether anyone could answer now: with the approval policy `deny`, only an
    /// interactive view (here or on another node) can.
    async fn answerable(&self) -> bool {
        if self.policy != ApprovalPolicy::Deny {
            return true;
        }
        let here = self.loaded.events.interactive_views() as u64;
        here + self.env.watchers_elsewhere(&self.loaded.events.read(|s| s.session.id.clone())).await.interactive > 0
    }

    fn approval(&self, run: &Run, ask: &LiveAsk, now: time::Millis) -> Approval {
        let ttl = i64::try_from(self.env.settings.approval_ttl.as_millis()).unwrap_or(i64::MAX);
        let redact = crate::run::redact;
        // The server wrote the message and the schema: masked like all a card shows.
        let schema = serde_json::from_str(&redact(&ask.schema.to_string())).unwrap_or_else(|_| ask.schema.clone());
        let payload = json!({
            LIVE: true,
            "tool": self.tool,
            "source": ask.source,
            "question": redact(&ask.message),
            "fields": schema,
            "change": format!("{} asks: {}", ask.source, redact(&ask.message)),
            "reason": "a tool's server asks you this while its call runs; answer it, or decline",
        });
        crate::run::pending_approval(run, (&self.call_id, &self.tool), ApprovalKind::ProvideInput, payload, now, ttl)
    }
}

#[async_trait::async_trait]
impl AskPerson for CallAsker {
    async fn ask(&self, ask: LiveAsk) -> LiveAnswer {
        if self.cancel.is_cancelled() || !self.answerable().await {
            return LiveAnswer::Cancel;
        }
        let store = &self.store;
        let run = match store.get_run(&self.run_id).await {
            Ok(Some(run)) if run.status == RunStatus::Running => run,
            Ok(_) => return LiveAnswer::Cancel,
            Err(error) => {
                tracing::warn!(run = %self.run_id, %error, "could not read the run to ask the person");
                return LiveAnswer::Cancel;
            }
        };
        let approval = self.approval(&run, &ask, self.env.clock.now_ms());
        let answered = self.env.live.wait(&approval.id);
        // The run is written back as it is stored: still `running`.
        if let Err(error) = store.interrupt_run(&run, &approval, &live_checkpoint()).await {
            tracing::warn!(run = %run.id, %error, "could not save a live ask");
            self.env.live.forget(&approval.id);
            return LiveAnswer::Cancel;
        }
        self.open.lock().unwrap_or_else(|p| p.into_inner()).push(approval.clone());
        let shown = approval.clone();
        self.loaded.events.publish(move |s| {
            s.pending_approvals.push(shown);
            Some(FrameBody::State { state: Box::new(s.clone()) })
        });
        self.loaded.events.publish_body(FrameBody::LoopEvent {
            run_id: run.id.clone(),
            message_index: None,
            message_id: None,
            event: AgentEvent::ApprovalRequested { approval: Box::new(approval.clone()) },
        });
        self.env.arm_expiry(&approval);
        let answer = tokio::select! {
            answer = answered => answer.unwrap_or(LiveAnswer::Cancel),
            _ = self.cancel.cancelled() => {
                end_unanswered(&self.env, &self.loaded, &approval, ApprovalStatus::Cancelled).await;
                LiveAnswer::Cancel
            }
            answer = settled_in_store(&self.env, &approval.id) => answer,
        };
        self.env.live.forget(&approval.id);
        self.closed(&approval.id);
        answer
    }
}

/// The answer to a live ask once the store has it settled (by a decision on any node).
async fn settled_in_store(env: &RunEnv, id: &ApprovalId) -> LiveAnswer {
    loop {
        tokio::time::sleep(STORE_POLL).await;
        match env.store.get_approval(id).await {
            Ok(Some((approval, _))) if approval.status == ApprovalStatus::Resolved => {
                let decision = approval.decision.clone().unwrap_or(Decision::Reject);
                return answer_of(&approval, &decision).unwrap_or(LiveAnswer::Cancel);
            }
            Ok(Some((approval, _))) if approval.status != ApprovalStatus::Pending => return LiveAnswer::Cancel,
            Ok(_) => {}
            Err(error) => tracing::warn!(approval = %id, %error, "could not read a live ask back"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked(schema: serde_json::Value) -> Approval {
        Approval {
            id: ApprovalId::new(),
            run_id: RunId::new(),
            session_id: SessionId::new(),
            owner_id: "usr_01jd0000000000000000000001".parse().expect("id"),
            tool_call_id: "c1".into(),
            tool: "srv_ask".into(),
            kind: ApprovalKind::ProvideInput,
            payload: json!({"live": true, "fields": schema}),
            status: ApprovalStatus::Pending,
            decision: None,
            message: None,
            actor: None,
            created_at: 0,
            expires_at: 1,
            resolved_at: None,
        }
    }

    #[test]
    fn a_fill_answers_with_the_schemas_fields_typed_and_defaults_filled_in() {
        let approval = asked(json!({
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "age": {"type": "integer"},
                "ok": {"type": "boolean"},
                "color": {"type": "string", "default": "red"},
            },
            "required": ["name"],
        }));
        let fill = Decision::Fill(json!({"name": "Ada", "age": "36", "ok": "yes", "extra": 1}));
        assert_eq!(
            answer_of(&approval, &fill).unwrap(),
            LiveAnswer::Accept(json!({"name": "Ada", "age": 36, "ok": true, "color": "red"}))
        );
        assert_eq!(answer_of(&approval, &Decision::Reject).unwrap(), LiveAnswer::Decline);
        let missing = answer_of(&approval, &Decision::Once).unwrap_err();
        assert!(missing.to_string().contains("name"), "{missing}");
        assert!(answer_of(&approval, &Decision::Always).is_err());
        assert!(answer_of(&approval, &Decision::Fill(json!("Ada"))).is_err());
    }

    #[test]
    fn a_question_clients_lone_answer_fills_a_one_field_schema() {
        let approval =
            asked(json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}));
        assert_eq!(
            answer_of(&approval, &Decision::Fill(json!({"answer": "Paris"}))).unwrap(),
            LiveAnswer::Accept(json!({"city": "Paris"}))
        );
    }
}
