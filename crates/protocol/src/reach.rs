//! What the outbox tells systems and people outside a session (issue 41): the event
//! types and the public JSON each carries.
//!
//! The store writes an event in the transaction of the change it tells of, with `data`
//! from the pure functions here, so every backend writes the same shape. What leaves
//! Spool this way goes to webhook receivers and push services, so it is *redacted by
//! construction*: ids, kinds, the tool's name, the card's redacted one-line summary,
//! times, statuses, an error's code and token usage. Never a message's text, a
//! decision's filled-in values, a person's message or a call's raw arguments.

use crate::approval::{Approval, ApprovalKind, Decision, NEVER_EXPIRES};
use crate::domain::{Run, Session};
use crate::time::Millis;
use serde_json::{Value, json};

/// The kinds of event the outbox carries (the `type` of a webhook's body).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventType {
    SessionCreated,
    ApprovalRequested,
    ApprovalResolved,
    QuestionAsked,
    RunSettled,
}

impl EventType {
    /// Every type, in the order the README lists them.
    pub const ALL: [EventType; 5] = [
        EventType::SessionCreated,
        EventType::ApprovalRequested,
        EventType::ApprovalResolved,
        EventType::QuestionAsked,
        EventType::RunSettled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EventType::SessionCreated => "session.created",
            EventType::ApprovalRequested => "approval.requested",
            EventType::ApprovalResolved => "approval.resolved",
            EventType::QuestionAsked => "question.asked",
            EventType::RunSettled => "run.settled",
        }
    }

    pub fn parse(text: &str) -> Option<EventType> {
        EventType::ALL.into_iter().find(|t| t.as_str() == text)
    }
}

impl std::fmt::Display for EventType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How long a summary may be, in characters: a notification's body line, not the card.
pub const SUMMARY_CHARS: usize = 200;

/// `session.created`: which session, in which project, for whom. The title is left out:
/// an untitled session takes its title from the first prompt's text.
pub fn session_created(session: &Session) -> Value {
    json!({
        "sessionId": session.id,
        "projectId": session.project_id,
        "ownerId": session.owner_id,
        "createdAt": session.created_at,
    })
}

/// The type an approval's request is told as: a question (a select or an input the
/// model asks a person for) or an approval (run this call or not). A client call (a
/// tool the client runs and answers) waits for that client, not a person, so it is an
/// approval request rather than a question, as the events list it.
pub fn requested_type(approval: &Approval) -> EventType {
    let asks = matches!(approval.kind, ApprovalKind::SelectOption | ApprovalKind::ProvideInput);
    if asks && !approval.is_client_call() { EventType::QuestionAsked } else { EventType::ApprovalRequested }
}

/// `approval.requested` / `question.asked` (see [`requested_type`]): the approval's ids,
/// kind, tool, its card's redacted summary, when it expires (`null`: never) and what a
/// rule says happens then.
pub fn approval_requested(approval: &Approval) -> (EventType, Value) {
    let mut data = approval_ids(approval);
    data["summary"] = summary(approval).into();
    data["expiresAt"] = expires_at(approval.expires_at);
    if let Some(then) = approval.payload.get("onTimeout").and_then(Value::as_str) {
        data["onTimeout"] = then.into();
    }
    if approval.is_client_call() {
        data["client"] = true.into();
    }
    (requested_type(approval), data)
}

/// `approval.resolved`: how an approval ended (`resolved`, `expired`, `cancelled`,
/// `superseded`), which decision won by its name only (`once`, `reject`, `fill`, …;
/// never the values filled in), who decided and when.
pub fn approval_resolved(approval: &Approval) -> Value {
    let mut data = approval_ids(approval);
    data["status"] = approval.status.as_str().into();
    data["decision"] = approval.decision.as_ref().map(decision_name).into();
    data["actorId"] = approval.actor.as_ref().map(|a| a.as_str()).into();
    data["resolvedAt"] = approval.resolved_at.into();
    data
}

/// `run.settled`: how a run ended, its error's code (the message may quote what the
/// run read, so it stays in Spool), its usage and times.
pub fn run_settled(run: &Run) -> Value {
    json!({
        "runId": run.id,
        "sessionId": run.session_id,
        "requestId": run.request_id,
        "status": run.status.as_str(),
        "error": run.error.as_ref().map(|e| json!({"code": e.code})),
        "usage": run.usage,
        "createdAt": run.created_at,
        "endedAt": run.ended_at,
    })
}

fn approval_ids(approval: &Approval) -> Value {
    json!({
        "approvalId": approval.id,
        "sessionId": approval.session_id,
        "runId": approval.run_id,
        "kind": approval.kind,
        "tool": approval.tool,
    })
}

/// The card's one line, already redacted where the card is made: what the call will
/// change, else the question asked, else the message of a live ask; the tool's name
/// when the payload has none of them. Cut at [`SUMMARY_CHARS`].
pub fn summary(approval: &Approval) -> String {
    let line = ["change", "question", "message"]
        .iter()
        .find_map(|key| approval.payload.get(*key).and_then(Value::as_str).filter(|s| !s.trim().is_empty()))
        .unwrap_or(&approval.tool);
    let mut chars = line.chars();
    let mut cut: String = chars.by_ref().take(SUMMARY_CHARS).collect();
    if chars.next().is_some() {
        cut.pop();
        cut.push('…');
    }
    cut
}

fn expires_at(at: Millis) -> Value {
    if at >= NEVER_EXPIRES { Value::Null } else { at.into() }
}

/// A decision by its name: `once`, `always`, `reject`, `fill`, `output`.
pub fn decision_name(decision: &Decision) -> &'static str {
    match decision {
        Decision::Once => "once",
        Decision::Always => "always",
        Decision::Reject => "reject",
        Decision::Fill(_) => "fill",
        Decision::Output(_) => "output",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::approval::ApprovalStatus;
    use crate::ids::*;

    fn approval(kind: ApprovalKind, payload: Value) -> Approval {
        Approval {
            id: ApprovalId::new(),
            run_id: RunId::new(),
            session_id: SessionId::new(),
            owner_id: UserId::new(),
            tool_call_id: "call_1".into(),
            tool: "bash".into(),
            kind,
            payload,
            status: ApprovalStatus::Pending,
            decision: None,
            message: None,
            actor: None,
            created_at: 1,
            expires_at: NEVER_EXPIRES,
            resolved_at: None,
        }
    }

    #[test]
    fn a_request_carries_the_summary_but_never_the_arguments() {
        let asked = approval(
            ApprovalKind::ConfirmAction,
            json!({"tool": "bash", "argument": "echo secret", "change": "Run a command", "onTimeout": "deny"}),
        );
        let (kind, data) = approval_requested(&asked);
        assert_eq!(kind, EventType::ApprovalRequested);
        assert_eq!(data["summary"], "Run a command");
        assert_eq!(data["expiresAt"], Value::Null, "never expires");
        assert_eq!(data["onTimeout"], "deny");
        assert!(!data.to_string().contains("echo secret"), "{data}");
    }

    #[test]
    fn questions_are_asked_but_client_calls_are_requested() {
        let question = approval(ApprovalKind::SelectOption, json!({"question": "Which one?", "options": []}));
        assert_eq!(approval_requested(&question).0, EventType::QuestionAsked);
        assert_eq!(approval_requested(&question).1["summary"], "Which one?");
        let client = approval(ApprovalKind::ProvideInput, json!({"client": true, "arguments": {"pin": "1234"}}));
        let (kind, data) = approval_requested(&client);
        assert_eq!(kind, EventType::ApprovalRequested);
        assert!(!data.to_string().contains("1234"), "{data}");
    }

    #[test]
    fn a_resolution_names_the_decision_but_not_what_was_filled_in() {
        let mut decided = approval(ApprovalKind::ProvideInput, json!({"question": "Name?"}));
        decided.status = ApprovalStatus::Resolved;
        decided.decision = Some(Decision::Fill(json!({"name": "hunter2"})));
        decided.message = Some("private words".into());
        let data = approval_resolved(&decided);
        assert_eq!(data["decision"], "fill");
        assert!(!data.to_string().contains("hunter2") && !data.to_string().contains("private"), "{data}");
    }

    #[test]
    fn a_long_summary_is_cut() {
        let long = approval(ApprovalKind::ConfirmAction, json!({"change": "x".repeat(500)}));
        assert_eq!(summary(&long).chars().count(), SUMMARY_CHARS);
    }
}
