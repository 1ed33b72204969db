//! The work between two kills: sessions deciding approvals and streaming answers, and
//! a watcher on each session stream. Every request and answer goes into the round's
//! [`Ledger`], which the checks after the restart hold the server to.

use crate::common::SseStream;
use serde_json::{Value, json};
use spool_protocol::Cursor;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// SplitMix64: small and seedable, enough to pick instants and choices reproducibly.
pub(super) struct Rng(pub(super) u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// An independent generator for one task, drawn from this one.
    pub(super) fn fork(&mut self) -> Rng {
        Rng(self.next())
    }
}

/// Everything the clients of one round sent and were answered.
#[derive(Default)]
pub(super) struct Ledger {
    pub(super) prompts: Vec<PromptSent>,
    pub(super) decisions: Vec<DecisionSent>,
    /// Per session, the history as last read before the kill.
    pub(super) committed: HashMap<String, Vec<Value>>,
    /// Answers of a live server that break a promise (no kill explains them).
    pub(super) wrong: Vec<String>,
}

pub(super) struct PromptSent {
    pub(super) session: String,
    pub(super) request_id: String,
    pub(super) text: String,
    /// The token its command appends, for a tool prompt.
    pub(super) token: Option<String>,
    /// Set once the 202 arrived.
    pub(super) run: Option<String>,
}

#[derive(Clone)]
pub(super) struct DecisionSent {
    /// The route, without the server's address (a restart changes the port).
    pub(super) path: String,
    pub(super) body: Value,
    pub(super) key: String,
    pub(super) token: String,
    pub(super) run: String,
    pub(super) session: String,
    pub(super) tool_call_id: String,
    pub(super) approving: bool,
    /// Sent by the clients the kill interrupted (not by the checks after it).
    pub(super) before_kill: bool,
    /// Status and body, once the whole answer arrived.
    pub(super) answer: Option<(u16, String)>,
}

impl DecisionSent {
    pub(super) fn acknowledged(&self) -> bool {
        self.answer.as_ref().is_some_and(|(status, _)| (200..300).contains(status))
    }
}

/// A request failed: the server is gone (or answered wrongly, which is in the ledger).
pub(super) struct Gone;

/// One round's clients: they work until the server dies under them.
#[derive(Clone)]
pub(super) struct Live {
    pub(super) client: reqwest::Client,
    pub(super) base: String,
    pub(super) ledger: Arc<Mutex<Ledger>>,
}

impl Live {
    fn ledger(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.ledger.lock().expect("no client task panics holding the ledger")
    }

    fn wrong(&self, what: String) -> Gone {
        self.ledger().wrong.push(what);
        Gone
    }

    async fn get(&self, path: &str) -> Result<Value, Gone> {
        let res = self.client.get(format!("{}{path}", self.base)).send().await.map_err(|_| Gone)?;
        let status = res.status().as_u16();
        let body = res.text().await.map_err(|_| Gone)?;
        if status != 200 {
            return Err(self.wrong(format!("GET {path}: {status} {body}")));
        }
        serde_json::from_str(&body).map_err(|e| self.wrong(format!("GET {path}: not JSON ({e}): {body}")))
    }

    async fn post(&self, path: &str, body: &Value) -> Result<(u16, String), Gone> {
        let res = self.client.post(format!("{}{path}", self.base)).json(body).send().await.map_err(|_| Gone)?;
        let status = res.status().as_u16();
        Ok((status, res.text().await.map_err(|_| Gone)?))
    }

    /// Sends a prompt and records it; the run's id.
    async fn prompt(&self, session: &str, text: String, token: Option<String>) -> Result<String, Gone> {
        let request_id = format!("q-{}", token.clone().unwrap_or_else(|| format!("{:x}", rand_tag())));
        let body = json!({"text": text, "requestId": request_id});
        let at = {
            let mut ledger = self.ledger();
            ledger.prompts.push(PromptSent {
                session: session.to_owned(),
                request_id: request_id.clone(),
                text,
                token,
                run: None,
            });
            ledger.prompts.len() - 1
        };
        let (status, answer) = self.post(&format!("/api/sessions/{session}/prompt"), &body).await?;
        if status != 202 {
            return Err(self.wrong(format!("prompt {body} in {session}: {status} {answer}")));
        }
        let run = serde_json::from_str::<Value>(&answer).ok().and_then(|a| a["runId"].as_str().map(str::to_owned));
        let run = run.ok_or_else(|| self.wrong(format!("prompt accepted without a runId: {answer}")))?;
        self.ledger().prompts[at].run = Some(run.clone());
        Ok(run)
    }

    /// Waits until the run is parked at its approval; the approval as the session shows it.
    async fn asked(&self, session: &str, run: &str) -> Result<Value, Gone> {
        loop {
            let shown = self.get(&format!("/api/runs/{run}")).await?;
            match shown["status"].as_str() {
                Some("interrupted") => break,
                Some("running") => {}
                _ => return Err(self.wrong(format!("the run ended without asking for approval: {shown}"))),
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // The run is stored interrupted before its session publishes the approval.
        loop {
            let detail = self.get(&format!("/api/sessions/{session}")).await?;
            let pending = detail["state"]["pendingApprovals"].as_array().cloned().unwrap_or_default();
            if let Some(approval) = pending.into_iter().find(|a| a["runId"] == run) {
                return Ok(approval);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits until the run has ended and its session is idle; the run.
    async fn settled(&self, session: &str, run: &str) -> Result<Value, Gone> {
        let shown = loop {
            let shown = self.get(&format!("/api/runs/{run}")).await?;
            if matches!(shown["status"].as_str(), Some("completed" | "failed" | "cancelled")) {
                break shown;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        while self.get(&format!("/api/sessions/{session}")).await?["status"] != "idle" {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(shown)
    }

    /// Reads the session's history: what the kill must leave unchanged.
    async fn read_committed(&self, session: &str) -> Result<(), Gone> {
        let history = self.get(&format!("/api/sessions/{session}/messages?limit=500")).await?;
        let messages = history["messages"].as_array().cloned().unwrap_or_default();
        self.ledger().committed.insert(session.to_owned(), messages);
        Ok(())
    }

    /// Sends one decision and records it, with its answer once that arrived.
    async fn decide(&self, mut sent: DecisionSent) -> Result<(u16, String), Gone> {
        let at = {
            let mut ledger = self.ledger();
            ledger.decisions.push(sent.clone());
            ledger.decisions.len() - 1
        };
        let answer = self.post(&sent.path, &sent.body).await?;
        sent.answer = Some(answer.clone());
        self.ledger().decisions[at] = sent;
        Ok(answer)
    }
}

/// A tag that only has to differ between prompts of one session.
pub(super) fn rand_tag() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock after 1970").as_nanos()
}

/// Prompts whose `bash` call asks for approval, each decided in one of several ways.
pub(super) async fn approvals_worker(live: Live, session: String, tag: String, mut rng: Rng) -> Result<(), Gone> {
    for n in 0.. {
        let token = format!("{tag}n{n}");
        // A third sleep after the effect, so a kill often cuts the tool off mid-call.
        let command = match rng.below(3) {
            0 => format!("echo {token} >> effects.txt; sleep 0.3"),
            _ => format!("echo {token} >> effects.txt"),
        };
        let run =
            live.prompt(&session, format!("tool: bash {}", json!({"command": command})), Some(token.clone())).await?;
        let approval = live.asked(&session, &run).await?;
        let id = approval["id"].as_str().unwrap_or_default().to_owned();
        let on_session = format!("/api/sessions/{session}/approvals/{id}");
        let sent = |path: &str, body: Value, key: String, approving: bool| DecisionSent {
            path: path.to_owned(),
            body,
            key,
            token: token.clone(),
            run: run.clone(),
            session: session.clone(),
            tool_call_id: approval["toolCallId"].as_str().unwrap_or_default().to_owned(),
            approving,
            before_kill: true,
            answer: None,
        };
        let key = format!("{token}-a");
        match rng.below(100) {
            0..50 => {
                let body = json!({"decision": "once", "idempotencyKey": key});
                expect_ok(&live, live.decide(sent(&on_session, body, key, true)).await?)?;
            }
            50..65 => {
                let body = json!({"interruptId": id, "decision": "approve", "idempotencyKey": key});
                expect_ok(&live, live.decide(sent(&format!("/api/runs/{run}/resume"), body, key, true)).await?)?;
            }
            65..75 => {
                // A client that sends its decision twice at once: one answer, twice.
                let body = json!({"decision": "once", "idempotencyKey": key});
                let one = sent(&on_session, body, key, true);
                let (a, b) = tokio::join!(live.decide(one.clone()), live.decide(one));
                let (a, b) = (a?, b?);
                if a != b || a.0 != 200 {
                    return Err(live.wrong(format!("one key sent twice at once was answered {a:?} and {b:?}")));
                }
            }
            75..85 => {
                // Two people deciding at once: one wins, the other is told it lost.
                let approve = sent(&on_session, json!({"decision": "once", "idempotencyKey": key}), key, true);
                let key = format!("{token}-b");
                let reject = sent(&on_session, json!({"decision": "reject", "idempotencyKey": key}), key, false);
                let (a, b) = tokio::join!(live.decide(approve), live.decide(reject));
                let (a, b) = (a?, b?);
                let mut statuses = [a.0, b.0];
                statuses.sort_unstable();
                let lost = if a.0 == 409 { &a.1 } else { &b.1 };
                if statuses != [200, 409] || !lost.contains("already_resolved") {
                    return Err(live.wrong(format!("two racing decisions were answered {a:?} and {b:?}")));
                }
            }
            85..93 => {
                let body = json!({"decision": "reject", "idempotencyKey": key});
                expect_ok(&live, live.decide(sent(&on_session, body, key, false)).await?)?;
            }
            _ => {
                let body = json!({"decision": "reject", "message": "not this one", "idempotencyKey": key});
                expect_ok(&live, live.decide(sent(&on_session, body, key, false)).await?)?;
            }
        }
        live.settled(&session, &run).await?;
        live.read_committed(&session).await?;
    }
    Ok(())
}

fn expect_ok(live: &Live, (status, body): (u16, String)) -> Result<(), Gone> {
    if status == 200 { Ok(()) } else { Err(live.wrong(format!("a lone decision was answered {status} {body}"))) }
}

/// Prompts that stream long answers.
pub(super) async fn streams_worker(live: Live, session: String, mut rng: Rng) -> Result<(), Gone> {
    loop {
        let words = 50 + rng.below(450);
        let run = live.prompt(&session, format!("stream: {words}"), None).await?;
        live.settled(&session, &run).await?;
        live.read_committed(&session).await?;
    }
}

/// Reads the session's native stream until the server dies: within one connection
/// every frame's id is the stream's next seq, never a gap or a repeat.
pub(super) async fn watcher(live: Live, session: String) -> Result<(), Gone> {
    let url = format!("{}/api/sessions/{session}/events", live.base);
    let res = live.client.get(url).send().await.map_err(|_| Gone)?;
    if res.status() != 200 {
        return Err(live.wrong(format!("session stream of {session}: {}", res.status())));
    }
    let mut stream = SseStream::new(res);
    let mut last: Option<Cursor> = None;
    while let Some(event) = stream.next_event_unbounded().await {
        let Some(id) = event.id else { continue };
        let cursor = Cursor::parse(&id).ok_or_else(|| live.wrong(format!("a frame id that is no cursor: {id}")))?;
        if let Some(prev) = &last
            && (prev.stream_id != cursor.stream_id || cursor.seq != prev.seq + 1)
        {
            return Err(live.wrong(format!("session {session}: frame {cursor} after {prev}")));
        }
        last = Some(cursor);
    }
    // The body ends with an error when the server is killed under it.
    if stream.error.is_some() { Err(Gone) } else { Ok(()) }
}
