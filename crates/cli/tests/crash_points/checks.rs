//! After a restart, every promise of the module above, checked against what the
//! clients saw before the kill (the [`Ledger`]) and what the store holds.

use super::clients::{DecisionSent, Ledger};
use super::store::{Database, INTERRUPTED_UNPARKED, OPEN_CLAIMS, RUNNING};
use super::sweep::{ANSWER, SETTLE, Sweep};
use crate::common;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::time::{Duration, Instant};

impl Sweep {
    /// After a restart: every promise, checked against what the clients saw.
    pub(super) async fn check(&mut self, mut ledger: Ledger) -> Vec<String> {
        let mut broken = std::mem::take(&mut ledger.wrong);
        let base = self.base();
        let db = self.database();

        // Before any session is opened: runs a kill left between a decision and its
        // run's restart, which opening the session settles.
        self.tally.interrupted_unparked += db.rows(INTERRUPTED_UNPARKED).await.len();

        // Claims a dead process left: released at start on SQLite; after two minutes on
        // PostgreSQL, which ageing them stands in for.
        if self.db.is_some() {
            db.age_open_claims().await;
            if let Err(left) = db.none_within(SETTLE, OPEN_CLAIMS).await {
                broken.push(format!("claims not released {SETTLE:?} after they were due: {left:?}"));
            }
        } else {
            let left = db.rows(OPEN_CLAIMS).await;
            if !left.is_empty() {
                broken.push(format!("claims without a response after a restart: {left:?}"));
            }
        }

        for slot in &self.pool {
            self.call_ok(self.client.get(format!("{base}/api/sessions/{}", slot.session))).await;
        }

        // Every key used before the kill, again.
        let mut first: HashMap<String, DecisionSent> = HashMap::new();
        for d in &ledger.decisions {
            let seen = first.entry(d.key.clone()).or_insert_with(|| d.clone());
            if seen.answer.is_none() {
                seen.answer.clone_from(&d.answer);
            }
        }
        let mut again: Vec<DecisionSent> = first.into_values().collect();
        again.sort_by(|a, b| a.key.cmp(&b.key));
        for d in &again {
            self.tally.resent += 1;
            let res = self.client.post(format!("{base}{}", d.path)).json(&d.body).timeout(ANSWER).send().await;
            let answer = match res {
                Ok(res) => {
                    let status = res.status().as_u16();
                    (status, res.text().await.unwrap_or_default())
                }
                Err(e) => {
                    broken.push(format!("key {} sent again was not answered within {ANSWER:?}: {e}", d.key));
                    continue;
                }
            };
            match &d.answer {
                Some(was) if *was != answer => {
                    broken.push(format!("key {} was answered {was:?}, and {answer:?} when sent again", d.key));
                }
                Some(_) => {}
                None => {
                    self.tally.resent_unanswered += 1;
                    let lost = answer.0 == 409 && answer.1.contains("already_resolved");
                    self.tally.resent_too_late += usize::from(lost);
                    if answer.0 == 200 {
                        ledger.decisions.push(DecisionSent { answer: Some(answer), before_kill: false, ..d.clone() });
                    } else if !lost {
                        broken.push(format!("key {} (never answered) sent again: {answer:?}", d.key));
                    }
                }
            }
        }
        // Every prompt the server acknowledged, again: the same run, nothing new.
        for p in ledger.prompts.iter().filter(|p| p.run.is_some()) {
            let body = json!({"text": p.text, "requestId": p.request_id});
            let url = format!("{base}/api/sessions/{}/prompt", p.session);
            let answer = self.call_ok(self.client.post(url).json(&body)).await;
            if answer["runId"].as_str() != p.run.as_deref() {
                broken.push(format!("requestId {} named run {:?}, now {answer}", p.request_id, p.run));
            }
        }

        // Settle: nothing running; then decide what still waits, and settle again.
        loop {
            if let Err(left) = db.none_within(SETTLE, RUNNING).await {
                broken.push(format!("runs still running {SETTLE:?} after the restart: {left:?}"));
                return broken;
            }
            let mut decided = false;
            for slot in &self.pool {
                let detail = self.call_ok(self.client.get(format!("{base}/api/sessions/{}", slot.session))).await;
                for approval in detail["state"]["pendingApprovals"].as_array().cloned().unwrap_or_default() {
                    decided = true;
                    let sent = self.decide_after_restart(&ledger, &slot.session, &approval, &mut broken).await;
                    ledger.decisions.extend(sent);
                }
            }
            if !decided {
                break;
            }
        }
        // A run a kill left between its decision and its restart is settled when its
        // session is opened (with PostgreSQL, once the dead node's lease has expired).
        let deadline = Instant::now() + SETTLE;
        loop {
            for slot in &self.pool {
                self.call_ok(self.client.get(format!("{base}/api/sessions/{}", slot.session))).await;
            }
            let unparked = db.rows(INTERRUPTED_UNPARKED).await;
            if unparked.is_empty() {
                break;
            }
            if Instant::now() > deadline {
                broken.push(format!("interrupted runs without a pending approval after opening: {unparked:?}"));
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // Such a run goes on from its decided call (the reaper, or the opening, resumes
        // it), so it may be running now: wait until it has ended too.
        if let Err(left) = db.none_within(SETTLE, RUNNING).await {
            broken.push(format!("resumed runs still running {SETTLE:?} after opening their sessions: {left:?}"));
        }
        let open = db.rows(OPEN_CLAIMS).await;
        if !open.is_empty() {
            broken.push(format!("claims without a response once settled: {open:?}"));
        }

        // Every run the clients learned of has ended.
        let mut runs: HashMap<String, Value> = HashMap::new();
        for run in ledger.prompts.iter().filter_map(|p| p.run.clone()) {
            let shown = self.call_ok(self.client.get(format!("{base}/api/runs/{run}"))).await;
            if !matches!(shown["status"].as_str(), Some("completed" | "failed" | "cancelled")) {
                broken.push(format!("run {run} is {} once settled: {shown}", shown["status"]));
            }
            let ending = shown["error"]["code"].as_str().or(shown["status"].as_str()).unwrap_or("?").to_owned();
            *self.tally.endings.entry(ending).or_default() += 1;
            self.tally.runs += 1;
            runs.insert(run, shown);
        }

        self.check_effects(&ledger, &runs, &mut broken).await;
        self.check_history(&ledger, &mut broken).await;

        // Every session takes a new prompt, which completes.
        let pool: Vec<String> = self.pool.iter().map(|s| s.session.clone()).collect();
        for (slot, session) in pool.iter().enumerate() {
            match self.fresh_prompt(session).await {
                Ok(total) => self.pool[slot].total = total,
                Err(e) => broken.push(e),
            }
        }
        broken
    }

    /// Approves a call still waiting after a restart (with a key of its own), as a
    /// person would; the decision, acknowledged, joins the ledger.
    async fn decide_after_restart(
        &self,
        ledger: &Ledger,
        session: &str,
        approval: &Value,
        broken: &mut Vec<String>,
    ) -> Option<DecisionSent> {
        let base = self.base();
        let id = approval["id"].as_str().unwrap_or_default();
        let argument = approval["payload"]["argument"].as_str().unwrap_or_default();
        let token = ledger
            .prompts
            .iter()
            .filter_map(|p| p.token.clone())
            .find(|t| argument.contains(&format!("echo {t} ")))
            .unwrap_or_default();
        let path = format!("/api/sessions/{session}/approvals/{id}");
        // With PostgreSQL the dead node may hold the session's lease a moment longer:
        // the decision is then refused as too late, and made again with a new key.
        let deadline = Instant::now() + SETTLE;
        for attempt in 0.. {
            let key = format!("check-{id}-{attempt}");
            let body = json!({"decision": "once", "idempotencyKey": key});
            let res = self.client.post(format!("{base}{path}")).json(&body).timeout(ANSWER).send().await;
            let (status, text) = match res {
                Ok(r) => (r.status().as_u16(), r.text().await.unwrap_or_default()),
                Err(e) => {
                    broken.push(format!("deciding {id} after the restart: {e}"));
                    return None;
                }
            };
            if status == 200 {
                return Some(DecisionSent {
                    path,
                    body,
                    key,
                    token,
                    run: approval["runId"].as_str().unwrap_or_default().to_owned(),
                    session: session.to_owned(),
                    tool_call_id: approval["toolCallId"].as_str().unwrap_or_default().to_owned(),
                    approving: true,
                    before_kill: false,
                    answer: Some((status, text)),
                });
            }
            let still_pending = self.pending(session, id).await;
            if !still_pending || Instant::now() > deadline {
                broken.push(format!("deciding {id} after the restart: {status} {text} (pending: {still_pending})"));
                return None;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        unreachable!("the loop returns")
    }

    async fn pending(&self, session: &str, approval: &str) -> bool {
        let detail = self.call_ok(self.client.get(format!("{}/api/sessions/{session}", self.base()))).await;
        detail["state"]["pendingApprovals"].as_array().is_some_and(|a| a.iter().any(|p| p["id"] == approval))
    }

    /// Each command's token in `effects.txt`, against the decisions the clients saw.
    async fn check_effects(&mut self, ledger: &Ledger, runs: &HashMap<String, Value>, broken: &mut Vec<String>) {
        let effects = std::fs::read_to_string(self.project.join("effects.txt")).unwrap_or_default();
        let mut ran: HashMap<&str, usize> = HashMap::new();
        for line in effects.lines() {
            *ran.entry(line.trim()).or_default() += 1;
        }
        for (token, n) in &ran {
            if *n > 1 {
                broken.push(format!("command {token} ran {n} times"));
            }
        }
        for token in ledger.prompts.iter().filter_map(|p| p.token.as_deref()) {
            let n = ran.get(token).copied().unwrap_or(0);
            let decisions: Vec<&DecisionSent> = ledger.decisions.iter().filter(|d| d.token == token).collect();
            let approved = decisions.iter().find(|d| d.approving && d.acknowledged());
            let rejected = decisions.iter().any(|d| !d.approving && d.acknowledged());
            let asked_to_run = decisions.iter().any(|d| d.approving);
            if !asked_to_run && n > 0 {
                broken.push(format!("command {token} ran with no approving decision sent"));
            }
            if rejected && n > 0 {
                broken.push(format!("command {token} ran though its rejection was acknowledged"));
            }
            let Some(approved) = approved else { continue };
            let run = runs.get(&approved.run).cloned();
            let run = match run {
                Some(run) => run,
                None => self.call_ok(self.client.get(format!("{}/api/runs/{}", self.base(), approved.run))).await,
            };
            let code = run["error"]["code"].as_str().unwrap_or_default();
            if approved.before_kill {
                self.tally.acknowledged += 1;
                if code == "tool_outcome_unknown" {
                    self.tally.outcome_unknown += 1;
                }
            }
            if code == "tool_outcome_unknown" {
                continue;
            }
            if n != 1 {
                broken.push(format!(
                    "command {token}: approval acknowledged ({}), ran {n} times, run {} ended {} {}",
                    approved.key, approved.run, run["status"], run["error"]
                ));
            } else if run["status"] != "completed" && !self.has_result(&approved.session, &approved.tool_call_id).await
            {
                broken.push(format!(
                    "command {token}: approval acknowledged ({}), run {} ended {} {} without the call's result",
                    approved.key, approved.run, run["status"], run["error"]
                ));
            }
        }
    }

    /// Whether the session's history holds the result of the call.
    async fn has_result(&self, session: &str, tool_call_id: &str) -> bool {
        let url = format!("{}/api/sessions/{session}/messages?limit=500", self.base());
        let history = self.call_ok(self.client.get(url)).await;
        history["messages"]
            .as_array()
            .is_some_and(|m| m.iter().any(|m| m["role"] == "toolResult" && m["toolCallId"] == tool_call_id))
    }

    /// The history read before the kill is still there, message for message.
    async fn check_history(&self, ledger: &Ledger, broken: &mut Vec<String>) {
        for (session, before) in &ledger.committed {
            let url = format!("{}/api/sessions/{session}/messages?limit=500", self.base());
            let after = self.call_ok(self.client.get(url)).await;
            let after: HashMap<u64, &Value> = after["messages"]
                .as_array()
                .map(|m| m.iter().filter_map(|m| Some((m["index"].as_u64()?, m))).collect())
                .unwrap_or_default();
            for message in before {
                let index = message["index"].as_u64().unwrap_or(u64::MAX);
                if after.get(&index) != Some(&message) {
                    broken
                        .push(format!("session {session}: message {index} was {message}, now {:?}", after.get(&index)));
                }
            }
        }
    }

    /// A new prompt in the session, accepted and completed; the session's message count.
    async fn fresh_prompt(&self, session: &str) -> Result<u64, String> {
        let base = self.base();
        let url = format!("{base}/api/sessions/{session}/prompt");
        let body = json!({"text": format!("echo: alive after kill {}", self.tally.kills)});
        let deadline = Instant::now() + SETTLE;
        let run = loop {
            let res = self.client.post(&url).json(&body).timeout(ANSWER).send().await;
            let res = res.map_err(|e| format!("session {session}: a new prompt: {e}"))?;
            let status = res.status().as_u16();
            let text = res.text().await.unwrap_or_default();
            let value: Value = serde_json::from_str(&text).unwrap_or_default();
            match status {
                202 => break value["runId"].as_str().unwrap_or_default().to_owned(),
                // With PostgreSQL the dead node's lease may be a moment from expiring.
                409 if self.db.is_some() && text.contains("session_busy") && Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                _ => return Err(format!("session {session} refused a new prompt: {status} {text}")),
            }
        };
        let run_url = format!("{base}/api/runs/{run}");
        let run = common::wait_for(&self.client, &run_url, SETTLE, |r| r["status"] != "running").await;
        if run["status"] != "completed" {
            return Err(format!("session {session}: the new prompt's run ended {run}"));
        }
        let detail = common::wait_for(&self.client, &format!("{base}/api/sessions/{session}"), SETTLE, |d| {
            d["status"] == "idle"
        })
        .await;
        Ok(detail["state"]["total"].as_u64().unwrap_or(0))
    }

    fn database(&self) -> Database {
        match &self.db {
            Some(db) => Database::Postgres(db.url.clone()),
            None => Database::Sqlite(self.data.join("spool.db")),
        }
    }
}
