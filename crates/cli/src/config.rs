//! The optional config file (`--config FILE`, env `SPOOL_CONFIG`; default
//! `DATA_DIR/config.toml` when it exists). Today it holds permission rules:
//!
//! ```toml
//! approval_policy = "wait"      # or "deny": fail closed with no interactive view
//! approval_ttl_secs = 86400
//!
//! [[permission]]
//! tool = "bash"
//! pattern = "git *"            # optional, on the tool's main argument; default "*"
//! action = "allow"             # allow | ask | deny
//! ```
//!
//! Rules are appended after the built-in defaults (reading allowed; write, edit and
//! bash ask), and the last matching rule wins, so the file can loosen or tighten any
//! default. Unknown keys are an error: a typo must not silently change who approves.

use anyhow::Context;
use serde::Deserialize;
use spool_engine::ApprovalPolicy;
use spool_protocol::PermissionRule;
use std::path::Path;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    #[serde(default)]
    pub permission: Vec<PermissionRule>,
    pub approval_policy: Option<ApprovalPolicy>,
    pub approval_ttl_secs: Option<u64>,
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
        toml::from_str(&text).with_context(|| format!("parsing the config file {}", path.display()))
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
        assert!(toml::from_str::<FileConfig>("[[permision]]\ntool = \"x\"\naction = \"allow\"\n").is_err());
        assert!(toml::from_str::<FileConfig>("[[permission]]\ntool = \"x\"\naction = \"maybe\"\n").is_err());
    }
}
