//! The config file's `[limits]` table: what one user may make the server hold, and how
//! many searches run at once and for how long. Every key is optional; a missing one
//! keeps the engine's default (see `spool_engine::caps` and
//! `spool_engine::search_slots`, and README "Limits"):
//!
//! ```toml
//! [limits]
//! projects_per_user = 1000        # registered projects
//! sessions_per_user = 10000       # sessions not archived
//! sessions_per_minute = 60        # creation rate, after a burst of
//! session_burst = 120
//! queued_per_user = 256           # prompts queued across all of a user's sessions
//! queued_bytes_per_user = 16777216
//! searches_per_user = 2           # searches running at once
//! searches = 3                    # on this node, all users together
//! search_secs = 10                # longest search
//! upload_bytes = 20971520         # one uploaded file (see README "Attachments")
//! inline_file_bytes = 4194304     # one file sent inline as a data URL
//! files_per_prompt = 10
//! prompt_file_bytes = 25165824    # all files of one prompt
//! attachment_bytes_per_user = 1073741824
//! upload_ttl_hours = 24           # an upload no prompt sent is removed after this
//! ```
//!
//! Unknown keys are an error, like everywhere in the file: a misspelt limit must not
//! silently stay at its default.

use serde::Deserialize;
use spool_engine::attachments::AttachmentLimits;
use spool_engine::caps::UserCaps;
use spool_engine::search_slots::SearchLimits;
use std::time::Duration;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsConfig {
    pub projects_per_user: Option<usize>,
    pub sessions_per_user: Option<usize>,
    pub sessions_per_minute: Option<u32>,
    pub session_burst: Option<u32>,
    pub queued_per_user: Option<usize>,
    pub queued_bytes_per_user: Option<usize>,
    pub searches_per_user: Option<usize>,
    pub searches: Option<usize>,
    pub search_secs: Option<u64>,
    pub upload_bytes: Option<u64>,
    pub inline_file_bytes: Option<u64>,
    pub files_per_prompt: Option<usize>,
    pub prompt_file_bytes: Option<u64>,
    pub attachment_bytes_per_user: Option<u64>,
    pub upload_ttl_hours: Option<u64>,
}

impl LimitsConfig {
    /// The per-user caps: the file's where it sets them, the defaults elsewhere.
    pub fn caps(&self) -> UserCaps {
        let d = UserCaps::default();
        UserCaps {
            max_projects: self.projects_per_user.unwrap_or(d.max_projects),
            max_sessions: self.sessions_per_user.unwrap_or(d.max_sessions),
            sessions_per_minute: self.sessions_per_minute.unwrap_or(d.sessions_per_minute),
            session_burst: self.session_burst.unwrap_or(d.session_burst),
            max_queued: self.queued_per_user.unwrap_or(d.max_queued),
            max_queued_bytes: self.queued_bytes_per_user.unwrap_or(d.max_queued_bytes),
        }
    }

    /// The search limits, likewise.
    pub fn search(&self) -> SearchLimits {
        let d = SearchLimits::default();
        SearchLimits {
            per_user: self.searches_per_user.unwrap_or(d.per_user),
            server: self.searches.unwrap_or(d.server),
            time_limit: self.search_secs.map_or(d.time_limit, Duration::from_secs),
            hold: None,
        }
    }

    /// What files a user may send, likewise.
    pub fn attachments(&self) -> AttachmentLimits {
        let d = AttachmentLimits::default();
        AttachmentLimits {
            upload_bytes: self.upload_bytes.unwrap_or(d.upload_bytes),
            inline_file_bytes: self.inline_file_bytes.unwrap_or(d.inline_file_bytes),
            files_per_prompt: self.files_per_prompt.unwrap_or(d.files_per_prompt),
            prompt_file_bytes: self.prompt_file_bytes.unwrap_or(d.prompt_file_bytes),
            bytes_per_user: self.attachment_bytes_per_user.unwrap_or(d.bytes_per_user),
            upload_ttl: self.upload_ttl_hours.map_or(d.upload_ttl, |h| Duration::from_secs(h.saturating_mul(3600))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_keys_win_and_typos_are_refused() {
        let c: LimitsConfig = toml::from_str("sessions_per_user = 5\nsearch_secs = 2\n").expect("limits");
        assert_eq!(c.caps(), UserCaps { max_sessions: 5, ..UserCaps::default() });
        assert_eq!(c.search().time_limit, Duration::from_secs(2));
        assert_eq!(c.search().per_user, SearchLimits::default().per_user);
        assert!(toml::from_str::<LimitsConfig>("session_per_user = 5\n").is_err());
        let c: LimitsConfig = toml::from_str("upload_bytes = 1024\n").expect("limits");
        assert_eq!(c.attachments(), AttachmentLimits { upload_bytes: 1024, ..AttachmentLimits::default() });
        let c: LimitsConfig = toml::from_str("upload_ttl_hours = 2\n").expect("limits");
        assert_eq!(c.attachments().upload_ttl, Duration::from_secs(7200));
        assert_eq!(LimitsConfig::default().attachments().upload_ttl, Duration::from_secs(24 * 3600));
    }
}
