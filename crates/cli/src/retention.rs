//! The config file's `[snapshots]` and `[frame_log]` tables: whether step snapshots
//! and the run frame log are kept, how much a snapshot may record, and for how long
//! each is kept (see README "Snapshots and the frame log"). Every key is optional; a
//! missing one keeps the default shown:
//!
//! ```toml
//! [snapshots]
//! enabled = true              # record the project's files around steps that may change them
//! max_file_bytes = 2097152    # a larger file is left out
//! max_new_bytes = 67108864    # new or changed bytes one snapshot adds at most
//! max_files = 100000          # files one snapshot holds at most
//! retention_days = 7          # 0: kept for ever
//!
//! [frame_log]
//! enabled = true              # log every run's frames, so any run replays exactly
//! retention_days = 30         # 0: kept for ever
//! ```
//!
//! A value that cannot be meant (a limit of 0, a retention past a century) is an
//! error naming the key, as an unknown key is: a typo must not silently turn off what
//! lets a person undo the agent's changes.

use anyhow::bail;
use serde::Deserialize;
use spool_tools::SnapshotLimits;
use std::time::Duration;

/// The longest retention taken, in days: past it a number is a typo, not a wish.
const MAX_RETENTION_DAYS: u64 = 36_500;

/// `[snapshots]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnapshotsConfig {
    pub enabled: Option<bool>,
    pub max_file_bytes: Option<u64>,
    pub max_new_bytes: Option<u64>,
    pub max_files: Option<usize>,
    pub retention_days: Option<u64>,
}

/// `[frame_log]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FrameLogConfig {
    pub enabled: Option<bool>,
    pub retention_days: Option<u64>,
}

/// What `[snapshots]` asks for, checked.
#[derive(Debug, PartialEq, Eq)]
pub struct SnapshotSettings {
    pub enabled: bool,
    pub limits: SnapshotLimits,
    /// `None`: kept for ever.
    pub retention: Option<Duration>,
}

/// What `[frame_log]` asks for, checked.
#[derive(Debug, PartialEq, Eq)]
pub struct FrameLogSettings {
    pub enabled: bool,
    /// `None`: kept for ever.
    pub retention: Option<Duration>,
}

impl SnapshotsConfig {
    pub fn settings(&self) -> anyhow::Result<SnapshotSettings> {
        let d = SnapshotLimits::default();
        let positive = |key: &str, value: Option<u64>, default: u64| match value {
            Some(0) => bail!("[snapshots] {key} = 0 would record nothing; set enabled = false to turn snapshots off"),
            Some(n) => Ok(n),
            None => Ok(default),
        };
        let limits = SnapshotLimits {
            max_file_bytes: positive("max_file_bytes", self.max_file_bytes, d.max_file_bytes)?,
            max_new_bytes: positive("max_new_bytes", self.max_new_bytes, d.max_new_bytes)?,
            max_files: positive("max_files", self.max_files.map(|n| n as u64), d.max_files as u64)? as usize,
        };
        Ok(SnapshotSettings {
            enabled: self.enabled.unwrap_or(true),
            limits,
            retention: retention("[snapshots]", self.retention_days, 7)?,
        })
    }
}

impl FrameLogConfig {
    pub fn settings(&self) -> anyhow::Result<FrameLogSettings> {
        Ok(FrameLogSettings {
            enabled: self.enabled.unwrap_or(true),
            retention: retention("[frame_log]", self.retention_days, 30)?,
        })
    }
}

/// `retention_days` as a duration: `None` for 0 (for ever).
fn retention(table: &str, days: Option<u64>, default: u64) -> anyhow::Result<Option<Duration>> {
    match days.unwrap_or(default) {
        0 => Ok(None),
        days if days > MAX_RETENTION_DAYS => {
            bail!("{table} retention_days = {days} is more than {MAX_RETENTION_DAYS}; use 0 to keep them for ever")
        }
        days => Ok(Some(Duration::from_secs(days * 24 * 3600))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Duration = Duration::from_secs(24 * 3600);

    #[test]
    fn defaults_are_on_with_todays_limits_and_a_week_and_a_month() {
        let snapshots = SnapshotsConfig::default().settings().expect("defaults");
        assert_eq!(
            snapshots,
            SnapshotSettings { enabled: true, limits: SnapshotLimits::default(), retention: Some(7 * DAY) }
        );
        let log = FrameLogConfig::default().settings().expect("defaults");
        assert_eq!(log, FrameLogSettings { enabled: true, retention: Some(30 * DAY) });
    }

    #[test]
    fn set_keys_win_and_zero_days_keeps_for_ever() {
        let c: SnapshotsConfig =
            toml::from_str("enabled = false\nmax_file_bytes = 1024\nmax_files = 10\nretention_days = 0\n")
                .expect("toml");
        let s = c.settings().expect("valid");
        assert!(!s.enabled);
        assert_eq!(s.limits, SnapshotLimits { max_file_bytes: 1024, max_files: 10, ..SnapshotLimits::default() });
        assert_eq!(s.retention, None, "0 days: for ever");
        let c: FrameLogConfig = toml::from_str("enabled = false\nretention_days = 2\n").expect("toml");
        assert_eq!(c.settings().expect("valid"), FrameLogSettings { enabled: false, retention: Some(2 * DAY) });
    }

    #[test]
    fn bad_values_and_typos_are_errors_that_name_the_key() {
        let err = toml::from_str::<SnapshotsConfig>("max_new_bytes = 0\n").expect("toml").settings();
        let err = err.expect_err("zero").to_string();
        assert!(err.contains("[snapshots] max_new_bytes = 0"), "{err}");
        let err = toml::from_str::<FrameLogConfig>("retention_days = 100000\n").expect("toml").settings();
        let err = err.expect_err("a typo of a number").to_string();
        assert!(err.contains("[frame_log] retention_days = 100000"), "{err}");
        let err = toml::from_str::<SnapshotsConfig>("retention_days = -1\n").expect_err("negative").to_string();
        assert!(err.contains("retention_days"), "{err}");
        let err = toml::from_str::<SnapshotsConfig>("retension_days = 3\n").expect_err("typo").to_string();
        assert!(err.contains("retension_days"), "{err}");
        let err = toml::from_str::<FrameLogConfig>("enabled = \"no\"\n").expect_err("not a bool").to_string();
        assert!(err.contains("enabled"), "{err}");
    }
}
