//! The optional config file (`--config FILE`, env `SPOOL_CONFIG`; default
//! `DATA_DIR/config.toml` when it exists). Today it holds permission rules:
//!
//! ```toml
//! model = "openai:gpt-4o-mini"  # the default model (--model / SPOOL_MODEL win)
//! models = ["ollama:llama3.2"]  # also offered for sessions to switch to
//! approval_policy = "wait"      # or "deny": fail closed with no interactive view
//! approval_ttl_secs = 86400   # 0: approvals never expire
//! client_tool_ttl_secs = 3600   # how long a client tool's call waits for its result
//! context_budget_tokens = 100000
//! git_poll_secs = 5             # the git poller's interval; 0 turns it off
//!
//! [env]                         # provider settings, read before the environment
//! OPENAI_API_KEY = "sk-…"
//! OLLAMA_BASE_URL = "http://127.0.0.1:11434/v1"
//!
//! [prices."openai:gpt-4o-mini"] # US dollars per million tokens
//! input = 0.15
//! output = 0.6
//!
//! [[permission]]
//! tool = "bash"
//! pattern = "git *"            # optional, on the tool's main argument; default "*"
//! action = "allow"             # allow | ask | deny
//! timeout = "15m"              # an ask's wait: "90s", "15m", "2h", "1d", seconds, "never"
//! on_timeout = "deny"          # then: deny | allow | wait (default: the run is cancelled)
//!
//! [users.alice]                # per-user settings, by the name tokens were made for
//! roots = ["/home/alice/src"]  # where alice may register projects, besides --workspace-root
//! [sandbox]                     # how `bash` commands are confined
//! env = ["CARGO_HOME"]          # more variables passed through to commands
//! network = false               # block TCP connect/bind, UDP… (default: allowed)
//! [limits]                      # per-user caps and search limits (see limits.rs)
//! sessions_per_user = 10000
//! [snapshots]                   # step snapshots (see retention.rs for every key)
//! retention_days = 7            # 0: kept for ever
//! [frame_log]                   # the run frame log
//! retention_days = 30
//! [guardrails]                  # limits that pause a run to ask "continue?"
//! run_cost_usd = 2.0            # also run_tokens, run_wall_secs, run_tool_calls,
//! session_cost_usd = 20.0       # session_tokens; a session may only tighten them
//! [[mcp]]                       # an MCP server (see spool_mcp::config for every key)
//! name = "everything"
//! command = "node"
//! args = ["/opt/mcp/everything/dist/index.js"]
//! ```
//!
//! A relative root is taken from the config file's directory, not from wherever the
//! server happens to be started.
//!
//! Rules are appended after the built-in defaults (reading allowed; write, edit and
//! bash ask), and the last matching rule wins, so the file can loosen or tighten any
//! default. A deny here is final: no session rule or "always" lifts it. Unknown keys
//! are an error: a typo must not silently change who approves or what is confined.

use anyhow::Context;
use serde::Deserialize;
use spool_engine::{ApprovalPolicy, Price};
use spool_protocol::PermissionRule;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    #[serde(default)]
    pub permission: Vec<PermissionRule>,
    pub approval_policy: Option<ApprovalPolicy>,
    pub approval_ttl_secs: Option<u64>,
    /// Seconds a client tool's call waits for the client's result (`--client-tool-ttl-secs` wins).
    pub client_tool_ttl_secs: Option<u64>,
    pub context_budget_tokens: Option<u64>,
    /// Seconds between the git poller's readings (`--git-poll-secs` wins); 0: off.
    pub git_poll_secs: Option<u64>,
    /// The default model, `PROVIDER:MODEL`.
    pub model: Option<String>,
    /// More models sessions may switch to.
    #[serde(default)]
    pub models: Vec<String>,
    /// Provider settings (base URLs, keys) by environment-variable name.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub prices: BTreeMap<String, Price>,
    /// Per-user settings by user name.
    #[serde(default)]
    pub users: BTreeMap<String, UserConfig>,
    #[serde(default)]
    pub sandbox: SandboxConfig,
    /// `[limits]`: per-user caps and search limits.
    #[serde(default)]
    pub limits: crate::limits::LimitsConfig,
    /// `[[mcp]]`: MCP servers, as written; checked by `spool_mcp::servers`.
    #[serde(default)]
    pub mcp: Vec<spool_mcp::McpEntry>,
    /// `[snapshots]`: step snapshots, their limits and retention.
    #[serde(default)]
    pub snapshots: crate::retention::SnapshotsConfig,
    /// `[frame_log]`: the run frame log and its retention.
    #[serde(default)]
    pub frame_log: crate::retention::FrameLogConfig,
    /// `[guardrails]`: limits that park a run at a "continue?" approval.
    #[serde(default)]
    pub guardrails: GuardrailsConfig,
    /// `[[webhook]]`: receivers of Standard Webhooks (see `webhooks.rs`).
    #[serde(default)]
    pub webhook: Vec<crate::webhooks::WebhookEntry>,
    /// `[webhooks]`: the outbox's retry schedule.
    #[serde(default)]
    pub webhooks: crate::webhooks::WebhooksConfig,
    /// `[push]`: Web Push's VAPID contact and when an approval is pushed.
    #[serde(default)]
    pub push: spool_reach::push::PushConfig,
    /// The directory of the file read, for paths in it (`secret_file`).
    #[serde(skip)]
    pub base_dir: Option<PathBuf>,
}

/// `[guardrails]`: per-run and per-session limits (see `spool_protocol::guardrails`).
/// Reaching one parks the run at a `confirm_action` asking whether to go on; a session
/// may tighten them (`PATCH /api/sessions/{id}`), never loosen them.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GuardrailsConfig {
    pub run_cost_usd: Option<f64>,
    pub run_tokens: Option<u64>,
    pub run_wall_secs: Option<u64>,
    pub run_tool_calls: Option<u64>,
    pub session_cost_usd: Option<f64>,
    pub session_tokens: Option<u64>,
}

impl GuardrailsConfig {
    /// The limits, checked: a cost must be a finite number of at least 0.
    pub fn guardrails(&self) -> anyhow::Result<spool_protocol::Guardrails> {
        let guardrails = spool_protocol::Guardrails {
            run_cost_usd: self.run_cost_usd,
            run_tokens: self.run_tokens,
            run_wall_secs: self.run_wall_secs,
            run_tool_calls: self.run_tool_calls,
            session_cost_usd: self.session_cost_usd,
            session_tokens: self.session_tokens,
        };
        // Against no ceiling, only the values themselves are checked.
        if let Some(why) = guardrails.loosening(&spool_protocol::Guardrails::default()) {
            anyhow::bail!(
                "[guardrails]: {}",
                why.replace("runCostUsd", "run_cost_usd").replace("sessionCostUsd", "session_cost_usd")
            );
        }
        Ok(guardrails)
    }
}

/// One user's settings.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserConfig {
    /// Directories this user may register projects under, besides the global roots.
    #[serde(default)]
    pub roots: Vec<PathBuf>,
}

/// `[sandbox]`: what `bash` commands get beyond the defaults.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxConfig {
    /// Variable names passed through from the server's environment, besides the
    /// built-in allow-list (PATH, HOME, LANG, LC_*, TERM, USER…).
    #[serde(default)]
    pub env: Vec<String>,
    /// `false` blocks TCP connect and bind for commands (Landlock ABI 4+) and every
    /// other socket but netlink, UDP included (seccomp).
    pub network: Option<bool>,
}

impl SandboxConfig {
    pub fn settings(&self) -> spool_tools::SandboxSettings {
        spool_tools::SandboxSettings {
            env: self.env.clone(),
            network: self.network.unwrap_or(true),
            ..spool_tools::SandboxSettings::default()
        }
    }
}

impl FileConfig {
    /// Reads `explicit` (which must exist), else `default` if it exists, else nothing.
    pub fn load(explicit: Option<&Path>, default: &Path) -> anyhow::Result<FileConfig> {
        let path = match explicit {
            Some(p) => p,
            None if default.is_file() => default,
            None => return Ok(FileConfig::default()),
        };
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading the config file {}", path.display()))?;
        let mut config: FileConfig =
            toml::from_str(&text).with_context(|| format!("parsing the config file {}", path.display()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        config.base_dir = Some(base.to_path_buf());
        for user in config.users.values_mut() {
            for root in &mut user.roots {
                *root = base.join(&*root);
            }
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use spool_protocol::PermissionAction;

    #[test]
    fn parses_rules_and_policies_and_refuses_typos() {
        let c: FileConfig = toml::from_str(
            "approval_policy = \"deny\"\n[[permission]]\ntool = \"bash\"\npattern = \"git *\"\naction = \"allow\"\n[[permission]]\ntool = \"write\"\naction = \"deny\"\n",
        )
        .expect("valid config");
        assert_eq!(c.approval_policy, Some(ApprovalPolicy::Deny));
        assert_eq!(c.permission[0], PermissionRule::new("bash", "git *", PermissionAction::Allow));
        assert_eq!(c.permission[1].pattern, "*");
        let c: FileConfig = toml::from_str(
            "model = \"ollama:llama3\"\nmodels = [\"scripted\"]\n[env]\nOLLAMA_BASE_URL = \"http://127.0.0.1:1/v1\"\n[prices.\"ollama:llama3\"]\ninput = 1.5\n",
        )
        .expect("models config");
        assert_eq!(c.model.as_deref(), Some("ollama:llama3"));
        assert_eq!(c.prices["ollama:llama3"].input, 1.5);
        assert_eq!(c.env["OLLAMA_BASE_URL"], "http://127.0.0.1:1/v1");
        assert!(toml::from_str::<FileConfig>("[[permision]]\ntool = \"x\"\naction = \"allow\"\n").is_err());
        assert!(toml::from_str::<FileConfig>("[[permission]]\ntool = \"x\"\naction = \"maybe\"\n").is_err());
        let c: FileConfig = toml::from_str(
            "[[permission]]\ntool = \"bash\"\naction = \"ask\"\ntimeout = \"15m\"\non_timeout = \"deny\"\n[[permission]]\ntool = \"write\"\naction = \"ask\"\ntimeout = 90\n[[permission]]\ntool = \"edit\"\naction = \"ask\"\ntimeout = \"never\"\non_timeout = \"wait\"\n",
        )
        .expect("timeouts");
        use spool_protocol::{OnTimeout, Wait};
        assert_eq!(
            (c.permission[0].timeout, c.permission[0].on_timeout),
            (Some(Wait::Secs(900)), Some(OnTimeout::Deny))
        );
        assert_eq!((c.permission[1].timeout, c.permission[1].on_timeout), (Some(Wait::Secs(90)), None));
        assert_eq!((c.permission[2].timeout, c.permission[2].on_timeout), (Some(Wait::Never), Some(OnTimeout::Wait)));
        let bad = toml::from_str::<FileConfig>("[[permission]]\ntool = \"x\"\naction = \"ask\"\ntimeout = \"soon\"\n");
        assert!(bad.unwrap_err().to_string().contains("invalid timeout"));
        assert!(
            toml::from_str::<FileConfig>("[[permission]]\ntool = \"x\"\naction = \"ask\"\non_timeout = \"later\"\n")
                .is_err()
        );
        let c: FileConfig = toml::from_str("[sandbox]\nenv = [\"CARGO_HOME\"]\nnetwork = false\n").expect("sandbox");
        assert_eq!(
            c.sandbox.settings(),
            spool_tools::SandboxSettings { env: vec!["CARGO_HOME".into()], network: false, ..Default::default() }
        );
        assert!(FileConfig::default().sandbox.settings().network);
        assert!(toml::from_str::<FileConfig>("[sandbox]\nnetwrok = false\n").is_err());
        let c: FileConfig =
            toml::from_str("[guardrails]\nrun_cost_usd = 2.0\nrun_tool_calls = 50\n").expect("guardrails");
        let limits = c.guardrails.guardrails().expect("valid limits");
        assert_eq!((limits.run_cost_usd, limits.run_tool_calls, limits.run_tokens), (Some(2.0), Some(50), None));
        assert!(toml::from_str::<FileConfig>("[guardrails]\nrun_cost = 2\n").is_err(), "a typo is an error");
        let zero: FileConfig = toml::from_str("[guardrails]\nrun_cost_usd = 0.0\n").expect("parses");
        assert!(zero.guardrails.guardrails().is_err_and(|e| e.to_string().contains("run_cost_usd")));
        let c: FileConfig = toml::from_str("git_poll_secs = 0\n").expect("git poller off");
        assert_eq!(c.git_poll_secs, Some(0));
        assert_eq!(FileConfig::default().git_poll_secs, None, "the binary's default applies");
    }

    #[test]
    fn mcp_servers_are_read_and_checked() {
        let mut c: FileConfig =
            toml::from_str("[[mcp]]\nname = \"everything\"\ncommand = \"node\"\nargs = [\"index.js\"]\n").expect("mcp");
        let servers = spool_mcp::servers(std::mem::take(&mut c.mcp)).expect("valid entry");
        assert_eq!(servers[0].name, "everything");
        assert!(toml::from_str::<FileConfig>("[[mcp]]\nname = \"a\"\ncomand = \"node\"\n").is_err());
        let both: FileConfig =
            toml::from_str("[[mcp]]\nname = \"a\"\ncommand = \"x\"\nurl = \"http://h/\"\n").expect("toml");
        let err = spool_mcp::servers(both.mcp).expect_err("command and url").to_string();
        assert!(err.contains("[[mcp]] entry \"a\""), "{err}");
    }

    #[test]
    fn snapshot_and_frame_log_tables_are_read_and_a_bad_value_fails_the_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("config.toml");
        std::fs::write(&file, "[snapshots]\nretention_days = 0\nmax_files = 5\n[frame_log]\nenabled = false\n")
            .expect("write");
        let c = FileConfig::load(Some(&file), Path::new("/nonexistent")).expect("valid config");
        let snapshots = c.snapshots.settings().expect("valid");
        assert_eq!((snapshots.retention, snapshots.limits.max_files), (None, 5));
        assert!(!c.frame_log.settings().expect("valid").enabled);
        std::fs::write(&file, "[frame_log]\nretention_day = 3\n").expect("write");
        let err = format!("{:#}", FileConfig::load(Some(&file), Path::new("/nonexistent")).expect_err("typo"));
        assert!(err.contains("retention_day") && err.contains("config.toml"), "{err}");
    }

    #[test]
    fn user_roots_parse_relative_to_the_file_and_typos_are_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("config.toml");
        std::fs::write(&file, "[users.alice]\nroots = [\"/srv/a\", \"work\"]\n").expect("write");
        let c = FileConfig::load(Some(&file), Path::new("/nonexistent")).expect("valid config");
        assert_eq!(c.users["alice"].roots, [PathBuf::from("/srv/a"), dir.path().join("work")]);
        assert!(toml::from_str::<FileConfig>("[users.alice]\nroot = [\"/srv\"]\n").is_err());
    }
}
