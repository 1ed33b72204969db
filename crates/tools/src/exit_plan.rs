//! The `exit_plan` tool: in a session's `plan` mode the model researches with the tools
//! that change nothing, then hands its plan to the person through this tool. Every call
//! asks (see `Tool::asks`; a rule can deny it but never answer it), the hub shows it as
//! `agent.exit_plan`, and the person's decision is the answer:
//!
//! - **Accept** (approve once): the call succeeds, the session switches to `agent`
//!   mode (`Tool::mode_after`) and the run goes on with every tool, carrying the plan
//!   out.
//! - **Request changes** (reject with a message): the model reads the message as the
//!   call's error and stays in plan mode to revise. A reject without a message cancels
//!   the run, as for every tool.
//!
//! It is offered only in plan mode: in agent mode there is no plan to leave.

use crate::call::parse_args;
use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};
use spool_engine::{Ask, Tool, ToolContext, ToolOutput, ToolSpec};
use spool_protocol::{ApprovalKind, SessionMode};

/// The tool's name, as the model calls it.
pub(crate) const NAME: &str = "exit_plan";
/// Longest plan, in bytes: a plan is read by a person on a card.
const MAX_PLAN: usize = 64 * 1024;

/// Hands the plan to the person; accepted, it ends plan mode.
#[derive(Clone, Copy, Debug, Default)]
pub struct ExitPlan;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExitPlanArgs {
    plan: String,
}

impl ExitPlanArgs {
    fn read(args: &Value) -> Result<Self, String> {
        let parsed: ExitPlanArgs = parse_args(NAME, args.clone()).map_err(|e| e.to_string())?;
        if parsed.plan.trim().is_empty() {
            return Err("exit_plan: `plan` is empty; write the plan the person should accept".into());
        }
        if parsed.plan.len() > MAX_PLAN {
            return Err(format!("exit_plan: the plan is {} bytes; the limit is {MAX_PLAN}", parsed.plan.len()));
        }
        Ok(parsed)
    }
}

#[async_trait]
impl Tool for ExitPlan {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: NAME.into(),
            description: "You are in plan mode: you may look but not change anything. When your plan is ready, \
                          call this with the plan (Markdown). The person accepts it, and you then carry it out \
                          with every tool, or asks for changes, and you revise it."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "plan": {"type": "string", "maxLength": MAX_PLAN, "description": "The plan, in Markdown."}
                },
                "required": ["plan"],
                "additionalProperties": false
            }),
        }
    }

    fn main_argument(&self, _args: &Value) -> Option<String> {
        None
    }

    fn describe(&self, _args: &Value) -> String {
        "exit plan mode and carry out this plan".into()
    }

    fn check(&self, args: &Value) -> Result<(), String> {
        ExitPlanArgs::read(args).map(drop)
    }

    fn asks(&self, args: &Value) -> Option<Ask> {
        let parsed = ExitPlanArgs::read(args).ok()?;
        let mut payload = serde_json::Map::new();
        payload.insert("plan".into(), parsed.plan.into());
        Some(Ask { kind: ApprovalKind::ConfirmAction, payload })
    }

    fn available_in(&self, mode: SessionMode) -> bool {
        mode == SessionMode::Plan
    }

    fn mode_after(&self) -> Option<SessionMode> {
        Some(SessionMode::Agent)
    }

    async fn call(&self, args: Value, _ctx: &ToolContext) -> ToolOutput {
        match ExitPlanArgs::read(&args) {
            Ok(_) => ToolOutput::ok(
                "The person accepted the plan. Plan mode is over: carry the plan out now; every tool is available.",
            ),
            Err(e) => ToolOutput::error(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_must_be_there_and_bounded() {
        assert_eq!(ExitPlan.check(&json!({"plan": "1. read\n2. fix"})), Ok(()));
        let empty = ExitPlan.check(&json!({"plan": "  "})).unwrap_err();
        assert!(empty.contains("`plan` is empty"), "{empty}");
        let long = ExitPlan.check(&json!({"plan": "x".repeat(MAX_PLAN + 1)})).unwrap_err();
        assert!(long.contains("the limit is 65536"), "{long}");
        let extra = ExitPlan.check(&json!({"plan": "p", "answer": "yes"})).unwrap_err();
        assert!(extra.contains("answer"), "{extra}");
    }

    #[test]
    fn every_call_asks_with_the_plan_and_only_plan_mode_offers_it() {
        let ask = ExitPlan.asks(&json!({"plan": "# Plan\n1. edit"})).expect("asks");
        assert_eq!(ask.kind, ApprovalKind::ConfirmAction);
        assert_eq!(ask.payload.get("plan"), Some(&json!("# Plan\n1. edit")));
        assert!(ExitPlan.available_in(SessionMode::Plan));
        assert!(!ExitPlan.available_in(SessionMode::Agent));
        assert_eq!(ExitPlan.mode_after(), Some(SessionMode::Agent));
    }
}
