//! Tools that are not Spool's own: a [`ToolSource`] (an MCP client, one day others)
//! offers a session extra tools, turn by turn, beside the static [`ToolRegistry`].
//!
//! The run asks every source at the start of each model turn (and when a parked run
//! resumes) and keeps the answer as that turn's tools: a call is looked up in the list
//! the model was offered, so a list that changes meanwhile (an MCP `tools/list_changed`)
//! takes effect at the next turn. A call parked at an approval whose tool is gone when
//! it is approved ends as a tool error the model reads.
//!
//! The engine, not the source, decides how such a tool is judged: each one is wrapped
//! in [`Foreign`], so the rules match its name and its arguments as canonical JSON, it
//! never asks questions, switches modes or offers command patterns for "always", and it
//! is offered in plan mode only when it says it changes nothing *and* its source trusts
//! that ([`ToolOrigin`]). A source's tool named like a built-in is skipped: a server
//! must not be able to stand in for `read` and inherit its allow rule.
//!
//! Which sources a session is offered is its own choice ([`SourceChoices`], kept in
//! the store and set from the Rules panel) where it made one, and otherwise the
//! source's ([`ToolSource::serves`]: an MCP server's `projects`). A source turned off
//! is not asked at all: a stdio server is never started for that session.

use crate::model::ToolSpec;
use crate::tool::{Inspected, Tool, ToolContext, ToolOrigin, ToolOutput, ToolRegistry, ToolScope, ToolSource};
use async_trait::async_trait;
use spool_protocol::{CallSubject, SessionMode};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Longest a turn waits for one source's tools: a server that hangs must not hang the
/// run. Long enough for a stdio server's first start (a Node server takes seconds).
pub const SOURCE_WAIT: Duration = Duration::from_secs(30);

/// A session's choices about tool sources: a source's name → offered or not,
/// overriding the source's own default. A name no source has any more is ignored.
pub type SourceChoices = BTreeMap<String, bool>;

/// Whether `scope`'s turns are offered `source`'s tools: the session's choice if it
/// made one, else what the source says ([`ToolSource::serves`]).
pub fn source_enabled(source: &dyn ToolSource, scope: &ToolScope, choices: &SourceChoices) -> bool {
    choices.get(&source.name()).copied().unwrap_or_else(|| source.serves(scope))
}

/// `args` as JSON with every object's keys sorted, at every depth: one text for the
/// same arguments however the model ordered them, for rules to match.
pub fn canonical_json(args: &serde_json::Value) -> String {
    fn sorted(value: &serde_json::Value) -> serde_json::Value {
        match value {
            serde_json::Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                serde_json::Value::Object(keys.into_iter().map(|k| (k.clone(), sorted(&map[k]))).collect())
            }
            serde_json::Value::Array(items) => serde_json::Value::Array(items.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    sorted(args).to_string()
}

/// A source's tool as the engine judges it (see the module's comment).
pub(crate) struct Foreign {
    tool: Arc<dyn Tool>,
    origin: ToolOrigin,
}

impl Foreign {
    fn new(tool: Arc<dyn Tool>, source: &str) -> Foreign {
        let origin = tool.origin().unwrap_or_else(|| ToolOrigin {
            source: source.to_owned(),
            tool: tool.spec().name,
            read_only: false,
            trusted_read_only: false,
        });
        Foreign { tool, origin }
    }
}

#[async_trait]
impl Tool for Foreign {
    fn spec(&self) -> ToolSpec {
        self.tool.spec()
    }

    async fn call(&self, args: serde_json::Value, ctx: &ToolContext) -> ToolOutput {
        self.tool.call(args, ctx).await
    }

    fn main_argument(&self, args: &serde_json::Value) -> Option<String> {
        Some(canonical_json(args))
    }

    fn subject(&self, args: &serde_json::Value) -> CallSubject {
        CallSubject::single(self.main_argument(args))
    }

    fn describe(&self, _args: &serde_json::Value) -> String {
        format!("{} › {}", self.origin.source, self.origin.tool)
    }

    fn check(&self, args: &serde_json::Value) -> Result<(), String> {
        self.tool.check(args)
    }

    fn available_in(&self, mode: SessionMode) -> bool {
        match mode {
            SessionMode::Agent => true,
            SessionMode::Plan => self.origin.read_only && self.origin.trusted_read_only,
        }
    }

    fn origin(&self) -> Option<ToolOrigin> {
        Some(self.origin.clone())
    }

    async fn inspect(&self, _args: &serde_json::Value, _ctx: &ToolContext) -> Option<Inspected> {
        None
    }
}

impl ToolRegistry {
    /// The tools `scope`'s next turn offers: the static ones and those of every source
    /// enabled for it ([`source_enabled`] with the session's `choices`), each source
    /// tool wrapped as [`Foreign`]. A source's tool named like one already
    /// offered (a built-in, or an earlier source's) is skipped with a warning, and so
    /// is a source that does not answer within [`SOURCE_WAIT`]. Once `cancel` fires
    /// no source is waited for: the run is stopping. Without sources, the static
    /// registry itself.
    pub(crate) async fn for_turn(
        &self,
        scope: &ToolScope,
        choices: &SourceChoices,
        cancel: &CancellationToken,
    ) -> ToolRegistry {
        let mut turn = ToolRegistry { tools: self.tools.clone(), sources: Vec::new() };
        for source in &self.sources {
            if !source_enabled(&**source, scope, choices) {
                continue;
            }
            let name = source.name();
            let answered = tokio::select! {
                biased;
                () = cancel.cancelled() => break,
                answered = tokio::time::timeout(SOURCE_WAIT, source.tools(scope)) => answered,
            };
            let Ok(tools) = answered else {
                tracing::warn!(source = %name, wait = ?SOURCE_WAIT, "a tool source did not answer in time; none of its tools this turn");
                continue;
            };
            for tool in tools {
                let tool_name = tool.spec().name;
                if turn.tools.contains_key(&tool_name) {
                    tracing::warn!(source = %name, tool = %tool_name, "skipping a source's tool named like one already offered");
                    continue;
                }
                turn.tools.insert(tool_name, Arc::new(Foreign::new(tool, &name)));
            }
        }
        turn
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use spool_protocol::SessionId;
    use std::path::PathBuf;

    struct Echo {
        name: &'static str,
        origin: Option<ToolOrigin>,
    }

    #[async_trait]
    impl Tool for Echo {
        fn spec(&self) -> ToolSpec {
            ToolSpec { name: self.name.into(), description: "echo".into(), parameters: json!({"type": "object"}) }
        }
        async fn call(&self, args: serde_json::Value, _ctx: &ToolContext) -> ToolOutput {
            ToolOutput::ok(args.to_string())
        }
        fn available_in(&self, _mode: SessionMode) -> bool {
            true
        }
        fn origin(&self) -> Option<ToolOrigin> {
            self.origin.clone()
        }
    }

    struct Builtin;

    #[async_trait]
    impl Tool for Builtin {
        fn spec(&self) -> ToolSpec {
            ToolSpec { name: "read".into(), description: "the built-in".into(), parameters: json!({"type": "object"}) }
        }
        async fn call(&self, _args: serde_json::Value, _ctx: &ToolContext) -> ToolOutput {
            ToolOutput::ok("built-in")
        }
    }

    struct Source(Vec<Arc<dyn Tool>>);

    #[async_trait]
    impl ToolSource for Source {
        fn name(&self) -> String {
            "srv".into()
        }
        async fn tools(&self, _scope: &ToolScope) -> Vec<Arc<dyn Tool>> {
            self.0.clone()
        }
    }

    /// A source that never answers (a hung server).
    struct Hung;

    #[async_trait]
    impl ToolSource for Hung {
        fn name(&self) -> String {
            "hung".into()
        }
        async fn tools(&self, _scope: &ToolScope) -> Vec<Arc<dyn Tool>> {
            std::future::pending().await
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_source_that_does_not_answer_is_left_out_of_the_turn() {
        let tools: Vec<Arc<dyn Tool>> = vec![Arc::new(Echo { name: "srv_echo", origin: None })];
        let registry =
            ToolRegistry::new().with(Builtin).with_source(Arc::new(Hung)).with_source(Arc::new(Source(tools)));
        let started = tokio::time::Instant::now();
        let turn = registry.for_turn(&scope(), &SourceChoices::new(), &CancellationToken::new()).await;
        assert_eq!(started.elapsed(), SOURCE_WAIT);
        let names: Vec<_> = turn.specs().into_iter().map(|s| s.name).collect();
        assert_eq!(names, ["read", "srv_echo"], "the other sources still count");
        // A stopped run waits for no source at all.
        let cancel = CancellationToken::new();
        cancel.cancel();
        let started = tokio::time::Instant::now();
        let turn = registry.for_turn(&scope(), &SourceChoices::new(), &cancel).await;
        assert_eq!(started.elapsed(), Duration::ZERO);
        assert_eq!(turn.specs().len(), 1);
    }

    /// A source that serves only the project `/p`.
    struct OnlyP(Vec<Arc<dyn Tool>>);

    #[async_trait]
    impl ToolSource for OnlyP {
        fn name(&self) -> String {
            "onlyp".into()
        }
        async fn tools(&self, _scope: &ToolScope) -> Vec<Arc<dyn Tool>> {
            self.0.clone()
        }
        fn serves(&self, scope: &ToolScope) -> bool {
            scope.root == std::path::Path::new("/p")
        }
    }

    #[tokio::test]
    async fn a_session_choice_overrides_where_a_source_serves_both_ways() {
        let tools = |name| vec![Arc::new(Echo { name, origin: None }) as Arc<dyn Tool>];
        let registry = ToolRegistry::new()
            .with_source(Arc::new(Source(tools("srv_echo"))))
            .with_source(Arc::new(OnlyP(tools("onlyp_echo"))));
        let other = ToolScope { session_id: SessionId::new(), root: PathBuf::from("/q") };
        let offered = async |scope: &ToolScope, choices: &[(&str, bool)]| {
            let choices = choices.iter().map(|(k, v)| (k.to_string(), *v)).collect();
            let turn = registry.for_turn(scope, &choices, &CancellationToken::new()).await;
            turn.specs().into_iter().map(|s| s.name).collect::<Vec<_>>()
        };
        assert_eq!(offered(&scope(), &[]).await, ["onlyp_echo", "srv_echo"]);
        assert_eq!(offered(&other, &[]).await, ["srv_echo"], "not its project");
        assert_eq!(offered(&scope(), &[("srv", false)]).await, ["onlyp_echo"], "turned off for the session");
        assert_eq!(offered(&other, &[("onlyp", true)]).await, ["onlyp_echo", "srv_echo"], "turned on for it");
        assert_eq!(offered(&scope(), &[("gone", false)]).await.len(), 2, "a choice about no source changes nothing");
    }

    fn scope() -> ToolScope {
        ToolScope { session_id: SessionId::new(), root: PathBuf::from("/p") }
    }

    fn origin(read_only: bool, trusted_read_only: bool) -> Option<ToolOrigin> {
        Some(ToolOrigin { source: "srv".into(), tool: "t".into(), read_only, trusted_read_only })
    }

    #[test]
    fn canonical_json_sorts_keys_at_every_depth() {
        let args = json!({"b": 1, "a": {"z": [{"y": 1, "x": 2}], "c": "s"}});
        assert_eq!(canonical_json(&args), r#"{"a":{"c":"s","z":[{"x":2,"y":1}]},"b":1}"#);
    }

    #[tokio::test]
    async fn a_source_tool_named_like_a_built_in_is_skipped() {
        let tools: Vec<Arc<dyn Tool>> =
            vec![Arc::new(Echo { name: "read", origin: None }), Arc::new(Echo { name: "srv_echo", origin: None })];
        let registry = ToolRegistry::new().with(Builtin).with_source(Arc::new(Source(tools)));
        let turn = registry.for_turn(&scope(), &SourceChoices::new(), &CancellationToken::new()).await;
        let read = turn.get("read").expect("the built-in");
        assert!(read.origin().is_none(), "the built-in stays");
        assert_eq!(read.spec().description, "the built-in");
        assert!(turn.get("srv_echo").and_then(|t| t.origin()).is_some());
        assert!(registry.get("srv_echo").is_none(), "the static registry is unchanged");
    }

    #[tokio::test]
    async fn plan_mode_offers_a_source_tool_only_when_read_only_and_trusted() {
        // Whatever the tool itself says about modes: `Echo` claims every mode.
        let tools: Vec<Arc<dyn Tool>> = vec![
            Arc::new(Echo { name: "none", origin: None }),
            Arc::new(Echo { name: "claims", origin: origin(true, false) }),
            Arc::new(Echo { name: "trusted", origin: origin(false, true) }),
            Arc::new(Echo { name: "both", origin: origin(true, true) }),
        ];
        let turn = ToolRegistry::new()
            .with_source(Arc::new(Source(tools)))
            .for_turn(&scope(), &SourceChoices::new(), &CancellationToken::new())
            .await;
        let names = |mode| turn.specs_for(mode).into_iter().map(|s| s.name).collect::<Vec<_>>();
        assert_eq!(names(SessionMode::Plan), ["both"]);
        assert_eq!(names(SessionMode::Agent), ["both", "claims", "none", "trusted"]);
    }

    #[tokio::test]
    async fn a_source_tool_is_judged_on_its_canonical_arguments() {
        let tools: Vec<Arc<dyn Tool>> = vec![Arc::new(Echo { name: "srv_echo", origin: origin(false, false) })];
        let turn = ToolRegistry::new()
            .with_source(Arc::new(Source(tools)))
            .for_turn(&scope(), &SourceChoices::new(), &CancellationToken::new())
            .await;
        let tool = turn.get("srv_echo").expect("offered");
        let args = json!({"path": "/etc/passwd", "message": "hi"});
        // Not the `path` alone, as a built-in would be judged: every argument counts.
        assert_eq!(tool.main_argument(&args).as_deref(), Some(r#"{"message":"hi","path":"/etc/passwd"}"#));
        assert_eq!(tool.describe(&args), "srv › t");
        assert!(tool.always_options(&args).is_none() && tool.asks(&args).is_none() && tool.mode_after().is_none());
    }
}
