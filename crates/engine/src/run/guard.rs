//! Guardrails that pause, not fail: before each model call (cost, tokens, wall time)
//! and before each tool call (tool calls, wall time) the run compares what it used with
//! its limits — the server's `[guardrails]`, tightened by the session's own. One that
//! is reached parks the run at a `confirm_action` approval of the tool `guardrail`
//! through the same [`park`](RunTask::park) as any approval, so every client shows and
//! answers it and it survives a restart. `once` raises that limit one step (the next
//! pause comes at twice it, then three times …), `always` lifts it for the rest of the
//! run, `reject` stops the run, cancelled with `guardrail_stopped`.
//!
//! A limit may be overshot by one model call: a call's cost is known once it ended.
//! The counts that are not in the run's usage (tool calls, the time worked, the raises)
//! travel in every checkpoint of the run ([`GuardState`]), so a run parked for any
//! reason continues with them, on any node.

use super::*;
use spool_protocol::guardrails::{GUARDRAIL_TOOL, Guardrails, Limit};
use std::collections::{BTreeMap, BTreeSet};

/// What a run's guardrails counted and were told, kept in its checkpoints.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct GuardState {
    /// Steps each limit was raised by a `once`: its next pause is at `(1 + n) ×` it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub raised: BTreeMap<Limit, u32>,
    /// Limits an `always` lifted for the rest of the run.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub lifted: BTreeSet<Limit>,
    /// Tool calls the run made (each counted before it is decided).
    #[serde(default)]
    pub tool_calls: u64,
    /// Milliseconds the run worked before its last park (waiting does not count).
    #[serde(default)]
    pub active_ms: u64,
}

/// Where a guardrail parked the run: before a model call, or before the checkpoint's
/// pending call (then `pending` and `remaining` are the turn's calls still to run;
/// before a model call `pending` is only a placeholder naming the approval).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum Before {
    ModelCall,
    Call,
}

/// A checkpoint's guardrail pause: where, and which limit it was.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct GuardPause {
    pub before: Before,
    pub limit: Limit,
}

/// A limit reached: its value now (raised as the person allowed) and what was used.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Tripped {
    pub limit: Limit,
    pub value: f64,
    pub used: f64,
}

/// A run's guardrails while it works.
#[derive(Clone, Debug, Default)]
pub(crate) struct Guard {
    /// The server's limits tightened by the session's own.
    pub limits: Guardrails,
    pub state: GuardState,
    /// What the session's other runs used (read only when a session limit is set).
    pub session_before: Usage,
    /// When this task began working (engine clock, ms).
    pub started: time::Millis,
}

impl Guard {
    /// The limit reached before the next step, if any (the first in [`Limit::ALL`]'s order).
    pub fn check(&self, before: Before, run: &Usage, now: time::Millis) -> Option<Tripped> {
        let watched: &[Limit] = match before {
            Before::ModelCall => {
                &[Limit::RunCostUsd, Limit::RunTokens, Limit::RunWallSecs, Limit::SessionCostUsd, Limit::SessionTokens]
            }
            Before::Call => &[Limit::RunToolCalls, Limit::RunWallSecs],
        };
        watched.iter().find_map(|&limit| {
            let base = self.limits.get(limit)?;
            if self.state.lifted.contains(&limit) {
                return None;
            }
            let value = base * f64::from(1 + self.state.raised.get(&limit).copied().unwrap_or(0));
            let used = self.used(limit, run, now);
            (used >= value).then_some(Tripped { limit, value, used })
        })
    }

    /// What the run (or its session) used of `limit` by `now`.
    fn used(&self, limit: Limit, run: &Usage, now: time::Millis) -> f64 {
        let tokens = |u: &Usage| (u.input + u.output) as f64;
        match limit {
            Limit::RunCostUsd => run.cost,
            Limit::RunTokens => tokens(run),
            Limit::RunWallSecs => self.active_ms(now) as f64 / 1000.0,
            Limit::RunToolCalls => self.state.tool_calls as f64,
            Limit::SessionCostUsd => self.session_before.cost + run.cost,
            Limit::SessionTokens => tokens(&self.session_before) + tokens(run),
        }
    }

    /// Milliseconds worked by `now`: before the last park, and by this task.
    fn active_ms(&self, now: time::Millis) -> u64 {
        self.state.active_ms + u64::try_from(now.saturating_sub(self.started)).unwrap_or(0)
    }

    /// The state a checkpoint taken `now` keeps (the time this task worked included).
    pub fn state_at(&self, now: time::Millis) -> GuardState {
        GuardState { active_ms: self.active_ms(now), ..self.state.clone() }
    }

    /// `once`: raises `limit` one step, so the next pause comes at twice it (three
    /// times after a second `once` …) — or at the first multiple past what is used
    /// already (a session limit the earlier runs went far past), so it goes on.
    pub fn raise(&mut self, limit: Limit, run: &Usage, now: time::Millis) {
        let Some(base) = self.limits.get(limit).filter(|b| *b > 0.0) else { return };
        let past = (self.used(limit, run, now) / base).floor().min(f64::from(u32::MAX)) as u32;
        let raised = self.state.raised.entry(limit).or_default();
        *raised = (*raised + 1).max(past);
    }

    /// Whether any limit is set at all (else nothing is checked or read).
    pub fn is_off(&self) -> bool {
        self.limits.is_empty()
    }
}

/// How a person answered a guardrail: go on once (one more step), or for the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GoOn {
    Once,
    Always,
}

impl RunTask {
    /// Reads the session's own guardrails and, when a session limit is set, what its
    /// other runs used; the run's counts come from `state` (its checkpoint's, or none
    /// for a new run). The clock of its wall time starts now.
    pub(super) async fn load_guard(&mut self, state: GuardState) -> Result<(), Outcome> {
        let store = self.store.clone();
        let session = &self.run.session_id;
        let own = store
            .session_guardrails(session)
            .await
            .map_err(|e| failure("storage_error", format!("could not read the session's guardrails: {e}")))?;
        let limits = match own {
            Some(own) => self.env.settings.guardrails.tightest(&own),
            None => self.env.settings.guardrails,
        };
        let mut session_before = Usage::default();
        if limits.session_cost_usd.is_some() || limits.session_tokens.is_some() {
            let runs = store
                .runs_since(session, 0)
                .await
                .map_err(|e| failure("storage_error", format!("could not read the session's usage: {e}")))?;
            for run in runs.iter().filter(|r| r.id != self.run.id) {
                session_before.add(run.usage);
            }
        }
        self.guard = Guard { limits, state, session_before, started: self.env.clock.now_ms() };
        Ok(())
    }

    /// Before a model call: parks the run if a limit on cost, tokens or wall time is
    /// reached (`Err(Interrupted)`).
    pub(super) async fn guard_model_call(&mut self, turn: usize) -> Result<(), Outcome> {
        if self.guard.is_off() {
            return Ok(());
        }
        let Some(tripped) = self.guard.check(Before::ModelCall, &self.run.usage, self.env.clock.now_ms()) else {
            return Ok(());
        };
        // Nothing of the turn is pending: the checkpoint's call only names the approval.
        Err(self.park_guardrail(tripped, Before::ModelCall, turn, None, &[]).await)
    }

    /// Before the tool call `call` (with the turn's `remaining` calls after it): parks
    /// the run if the tool-call or wall-time limit is reached; else counts the call.
    pub(super) async fn guard_call(&mut self, turn: usize, call: &Call, remaining: &[Call]) -> Result<(), Outcome> {
        if self.guard.is_off() {
            return Ok(());
        }
        if let Some(tripped) = self.guard.check(Before::Call, &self.run.usage, self.env.clock.now_ms()) {
            return Err(self.park_guardrail(tripped, Before::Call, turn, Some(call.clone()), remaining).await);
        }
        self.guard.state.tool_calls += 1;
        Ok(())
    }

    /// Parks the run at a guardrail's `confirm_action`: tool `guardrail`, its call id
    /// `guard_<the approval's id>`, the payload naming the limit, its scope, its value
    /// and what was used, with the question the card asks.
    async fn park_guardrail(
        &mut self,
        tripped: Tripped,
        before: Before,
        turn: usize,
        call: Option<Call>,
        remaining: &[Call],
    ) -> Outcome {
        let Tripped { limit, value, used } = tripped;
        // Failing closed, as an ask does: nobody could answer, so the run stops here.
        if self.policy == ApprovalPolicy::Deny && self.interactive_views().await == 0 {
            let calls: Vec<Call> = call.into_iter().chain(remaining.iter().cloned()).collect();
            let why = |name: &str| format!("The {name} call did not run: the run was stopped at its guardrail.");
            self.end_unrun(calls, why).await;
            return Outcome::Rejected(RunError {
                code: "guardrail_stopped".into(),
                message: format!(
                    "{} No one is connected to answer (approval policy: deny), so the run was stopped",
                    limit.question(used, value).trim_end_matches(" Continue?")
                ),
            });
        }
        let now = self.env.clock.now_ms();
        let ttl = i64::try_from(self.env.settings.approval_ttl.as_millis()).unwrap_or(i64::MAX);
        let question = limit.question(used, value);
        let payload = serde_json::json!({
            "guardrail": { "limit": limit.as_str(), "scope": limit.scope(), "value": value, "used": used },
            "argument": question,
            "change": limit.change(),
            "reason": question,
        });
        let id = ApprovalId::new();
        let call_id = format!("guard_{}", id.as_str().split_once('_').map_or(id.as_str(), |(_, body)| body));
        let mut approval =
            pending_approval(&self.run, (&call_id, GUARDRAIL_TOOL), ApprovalKind::ConfirmAction, payload, now, ttl);
        approval.id = id;
        tracing::info!(limit = limit.as_str(), value, used, "a guardrail parks the run");
        let placeholder = Call { id: call_id, name: GUARDRAIL_TOOL.to_owned(), args: serde_json::json!({}) };
        self.guard_pause = Some(GuardPause { before, limit });
        self.park(approval, call.unwrap_or(placeholder), turn, remaining, None).await
    }

    /// Carries out the decision on a guardrail's pause: `once` raises the limit one
    /// step, `always` lifts it for the run, and the run goes on where it stopped (the
    /// turn's calls decided afresh); a reject stops the run, ending its unrun calls.
    pub(super) async fn continue_past_guardrail(
        &mut self,
        pause: GuardPause,
        checkpoint: Checkpoint,
        go_on: Option<GoOn>,
    ) -> Outcome {
        let limit = pause.limit;
        let calls: Vec<Call> = match pause.before {
            Before::ModelCall => Vec::new(),
            Before::Call => std::iter::once(checkpoint.pending).chain(checkpoint.remaining).collect(),
        };
        match go_on {
            Some(GoOn::Once) => self.guard.raise(limit, &self.run.usage, self.env.clock.now_ms()),
            Some(GoOn::Always) => {
                self.guard.state.lifted.insert(limit);
            }
            None => {
                let why = |name: &str| format!("The {name} call did not run: the run was stopped at its guardrail.");
                self.end_unrun(calls, why).await;
                return Outcome::Rejected(RunError {
                    code: "guardrail_stopped".into(),
                    message: format!(
                        "the run was stopped at its guardrail ({} {}); the run was cancelled",
                        limit.scope(),
                        limit.as_str()
                    ),
                });
            }
        }
        match pause.before {
            // The model call it stopped before has no call to mark started.
            Before::ModelCall => self.decided = None,
            // The call it stopped before was never decided: its step was begun.
            Before::Call => self.resumed_step = true,
        }
        self.turns(checkpoint.turn, calls, None).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard(limits: Guardrails) -> Guard {
        Guard { limits, ..Guard::default() }
    }

    #[test]
    fn a_limit_trips_when_reached_and_once_raises_it_a_step() {
        let mut g = guard(Guardrails { run_cost_usd: Some(2.0), ..Guardrails::default() });
        let spent = Usage { cost: 2.4, ..Usage::default() };
        assert_eq!(g.check(Before::ModelCall, &Usage { cost: 1.9, ..Usage::default() }, 0), None);
        let tripped = g.check(Before::ModelCall, &spent, 0).expect("tripped");
        assert_eq!((tripped.limit, tripped.value, tripped.used), (Limit::RunCostUsd, 2.0, 2.4));
        // Cost is not looked at before a tool call.
        assert_eq!(g.check(Before::Call, &spent, 0), None);
        g.raise(Limit::RunCostUsd, &spent, 0);
        assert_eq!(g.check(Before::ModelCall, &spent, 0), None, "next pause at $4");
        assert!(g.check(Before::ModelCall, &Usage { cost: 4.0, ..Usage::default() }, 0).is_some());
    }

    #[test]
    fn once_goes_past_what_is_used_already_and_always_lifts() {
        let mut g = guard(Guardrails { session_tokens: Some(10), ..Guardrails::default() });
        g.session_before = Usage { input: 35, output: 0, ..Usage::default() };
        let run = Usage::default();
        assert!(g.check(Before::ModelCall, &run, 0).is_some());
        g.raise(Limit::SessionTokens, &run, 0);
        assert_eq!(g.state.raised[&Limit::SessionTokens], 3, "the next pause at 40, past the 35 used");
        assert_eq!(g.check(Before::ModelCall, &run, 0), None);
        g.state.lifted.insert(Limit::SessionTokens);
        assert_eq!(g.check(Before::ModelCall, &Usage { input: 1000, ..Usage::default() }, 0), None);
    }

    #[test]
    fn tool_calls_and_time_worked_are_checked_before_a_call_and_kept_across_parks() {
        let mut g = guard(Guardrails { run_tool_calls: Some(2), run_wall_secs: Some(60), ..Guardrails::default() });
        g.state.tool_calls = 2;
        assert_eq!(g.check(Before::Call, &Usage::default(), 0).map(|t| t.limit), Some(Limit::RunToolCalls));
        g.state.tool_calls = 0;
        g.started = 1_000;
        g.state.active_ms = 50_000;
        assert_eq!(g.check(Before::Call, &Usage::default(), 10_000), None);
        let late = g.check(Before::ModelCall, &Usage::default(), 11_000).expect("60 s worked");
        assert_eq!((late.limit, late.used), (Limit::RunWallSecs, 60.0));
        assert_eq!(g.state_at(11_000).active_ms, 60_000);
        // Kept in checkpoints under camelCase names.
        let json = serde_json::to_value(GuardPause { before: Before::ModelCall, limit: Limit::RunWallSecs }).unwrap();
        assert_eq!(json, serde_json::json!({"before": "modelCall", "limit": "runWallSecs"}));
        g.state.raised.insert(Limit::RunCostUsd, 1);
        let back: GuardState = serde_json::from_value(serde_json::to_value(&g.state).unwrap()).unwrap();
        assert_eq!(back, g.state);
    }
}
