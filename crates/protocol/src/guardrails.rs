//! Guardrails: limits on what one run, and one session, may spend (cost, tokens, wall
//! time, tool calls). Reaching one does not fail the run: it parks at a
//! `confirm_action` approval of the tool [`GUARDRAIL_TOOL`] that asks whether to go on
//! (see `spool_engine`'s `run/guard.rs`). The server's `[guardrails]` are the ceiling;
//! a session's own may only tighten them ([`Guardrails::loosening`]).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The tool name of a guardrail's approval (it is no tool the model can call).
pub const GUARDRAIL_TOOL: &str = "guardrail";

/// Limits; an absent one is no limit. Costs are US dollars as `[prices]` compute them
/// (a model without a price costs nothing: use token limits for it); tokens are input
/// plus output tokens; wall time counts while the run works, not while it waits for a
/// person.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Guardrails {
    /// US dollars one run may spend before it asks to go on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_cost_usd: Option<f64>,
    /// Tokens one run may use before it asks to go on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_tokens: Option<u64>,
    /// Seconds one run may work before it asks to go on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_wall_secs: Option<u64>,
    /// Tool calls one run may make before it asks to go on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_tool_calls: Option<u64>,
    /// US dollars the session's runs together may spend before a run asks to go on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_cost_usd: Option<f64>,
    /// Tokens the session's runs together may use before a run asks to go on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_tokens: Option<u64>,
}

/// One of the limits of [`Guardrails`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Limit {
    RunCostUsd,
    RunTokens,
    RunWallSecs,
    RunToolCalls,
    SessionCostUsd,
    SessionTokens,
}

impl Limit {
    pub const ALL: [Limit; 6] = [
        Limit::RunCostUsd,
        Limit::RunTokens,
        Limit::RunWallSecs,
        Limit::RunToolCalls,
        Limit::SessionCostUsd,
        Limit::SessionTokens,
    ];

    /// Its name on the wire (and in approval payloads): `runCostUsd` …
    pub fn as_str(self) -> &'static str {
        match self {
            Limit::RunCostUsd => "runCostUsd",
            Limit::RunTokens => "runTokens",
            Limit::RunWallSecs => "runWallSecs",
            Limit::RunToolCalls => "runToolCalls",
            Limit::SessionCostUsd => "sessionCostUsd",
            Limit::SessionTokens => "sessionTokens",
        }
    }

    /// `run` or `session`: what it counts.
    pub fn scope(self) -> &'static str {
        match self {
            Limit::SessionCostUsd | Limit::SessionTokens => "session",
            _ => "run",
        }
    }

    /// What a run spent of it, as a sentence's object: "$2.13", "12000 tokens" …
    pub fn amount(self, value: f64) -> String {
        let count = |one: &str, many: &str| format!("{value:.0} {}", if value == 1.0 { one } else { many });
        match self {
            Limit::RunCostUsd | Limit::SessionCostUsd => format!("${value:.2}"),
            Limit::RunTokens | Limit::SessionTokens => count("token", "tokens"),
            Limit::RunWallSecs => count("second", "seconds"),
            Limit::RunToolCalls => count("tool call", "tool calls"),
        }
    }

    /// The verb of its sentence: "has spent", "has used", "has worked", "has made".
    fn verb(self) -> &'static str {
        match self {
            Limit::RunCostUsd | Limit::SessionCostUsd => "has spent",
            Limit::RunTokens | Limit::SessionTokens => "has used",
            Limit::RunWallSecs => "has worked",
            Limit::RunToolCalls => "has made",
        }
    }

    /// The question a guardrail's card asks: "This run has spent $2.13 (limit $2.00).
    /// Continue?"
    pub fn question(self, used: f64, limit: f64) -> String {
        let whose = if self.scope() == "session" { "This session" } else { "This run" };
        format!("{whose} {} {} (limit {}). Continue?", self.verb(), self.amount(used), self.amount(limit))
    }

    /// The card's one-line change: "Continue past the run's cost limit".
    pub fn change(self) -> String {
        let what = match self {
            Limit::RunCostUsd | Limit::SessionCostUsd => "cost",
            Limit::RunTokens | Limit::SessionTokens => "token",
            Limit::RunWallSecs => "time",
            Limit::RunToolCalls => "tool call",
        };
        format!("Continue past the {}'s {what} limit", self.scope())
    }
}

impl Guardrails {
    /// The value of `limit`, as a number (`None`: no limit).
    pub fn get(&self, limit: Limit) -> Option<f64> {
        match limit {
            Limit::RunCostUsd => self.run_cost_usd,
            Limit::RunTokens => self.run_tokens.map(|v| v as f64),
            Limit::RunWallSecs => self.run_wall_secs.map(|v| v as f64),
            Limit::RunToolCalls => self.run_tool_calls.map(|v| v as f64),
            Limit::SessionCostUsd => self.session_cost_usd,
            Limit::SessionTokens => self.session_tokens.map(|v| v as f64),
        }
    }

    /// Whether no limit is set.
    pub fn is_empty(&self) -> bool {
        Limit::ALL.iter().all(|l| self.get(*l).is_none())
    }

    /// The stricter of the two for every limit (a limit either sets counts).
    pub fn tightest(&self, other: &Guardrails) -> Guardrails {
        fn min<T: PartialOrd + Copy>(a: Option<T>, b: Option<T>) -> Option<T> {
            match (a, b) {
                (Some(a), Some(b)) => Some(if b < a { b } else { a }),
                (a, b) => a.or(b),
            }
        }
        Guardrails {
            run_cost_usd: min(self.run_cost_usd, other.run_cost_usd),
            run_tokens: min(self.run_tokens, other.run_tokens),
            run_wall_secs: min(self.run_wall_secs, other.run_wall_secs),
            run_tool_calls: min(self.run_tool_calls, other.run_tool_calls),
            session_cost_usd: min(self.session_cost_usd, other.session_cost_usd),
            session_tokens: min(self.session_tokens, other.session_tokens),
        }
    }

    /// Why these limits, a session's own, are refused under the server's `ceiling`:
    /// a limit that is not a finite number above 0, or one above the
    /// server's (a session may only tighten; leaving one out keeps the server's).
    pub fn loosening(&self, ceiling: &Guardrails) -> Option<String> {
        for limit in Limit::ALL {
            let Some(wanted) = self.get(limit) else { continue };
            // Zero would ask before every step, and a raise of zero never lets it on.
            if !wanted.is_finite() || wanted <= 0.0 {
                return Some(format!("{} must be a number above 0", limit.as_str()));
            }
            if let Some(server) = ceiling.get(limit)
                && wanted > server
            {
                return Some(format!(
                    "{} {} is above the server's limit {}: a session's guardrails may only tighten the server's",
                    limit.as_str(),
                    wanted,
                    server
                ));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_may_tighten_but_not_loosen() {
        let server = Guardrails { run_cost_usd: Some(2.0), run_tool_calls: Some(10), ..Default::default() };
        let tighter = Guardrails { run_cost_usd: Some(1.0), session_tokens: Some(5), ..Default::default() };
        assert_eq!(tighter.loosening(&server), None);
        let looser = Guardrails { run_tool_calls: Some(11), ..Default::default() };
        assert!(looser.loosening(&server).is_some_and(|why| why.contains("runToolCalls")));
        let negative = Guardrails { run_cost_usd: Some(-1.0), ..Default::default() };
        assert!(negative.loosening(&server).is_some());
        let both = server.tightest(&tighter);
        assert_eq!(both.run_cost_usd, Some(1.0));
        assert_eq!(both.run_tool_calls, Some(10));
        assert_eq!(both.session_tokens, Some(5));
    }

    #[test]
    fn the_question_says_what_was_spent_and_the_limit() {
        assert_eq!(Limit::RunCostUsd.question(2.13, 2.0), "This run has spent $2.13 (limit $2.00). Continue?");
        assert_eq!(
            Limit::SessionTokens.question(1200.0, 1000.0),
            "This session has used 1200 tokens (limit 1000 tokens). Continue?"
        );
        assert_eq!(Limit::RunToolCalls.change(), "Continue past the run's tool call limit");
        assert_eq!(
            Limit::RunToolCalls.question(1.0, 1.0),
            "This run has made 1 tool call (limit 1 tool call). Continue?"
        );
    }

    #[test]
    fn guardrails_are_camel_case_json_and_refuse_unknown_keys() {
        let parsed: Guardrails = serde_json::from_str(r#"{"runCostUsd": 2, "sessionTokens": 100}"#).unwrap();
        assert_eq!(parsed.run_cost_usd, Some(2.0));
        assert_eq!(parsed.session_tokens, Some(100));
        assert!(serde_json::from_str::<Guardrails>(r#"{"run_cost_usd": 2}"#).is_err());
    }
}
