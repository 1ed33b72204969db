//! Where one session lives in Redis. Every name carries the session id in a hash tag
//! (`{ses_…}`), so a session's keys and channel hash to one Redis Cluster slot and one
//! script may touch all of them.

use spool_protocol::SessionId;

/// The Redis names of one session.
pub(crate) struct Keys {
    /// Hash: `epoch` (a stream id), `seq` (last published), `bytes` (frame bytes in `log`).
    pub meta: String,
    /// Stream: one entry per frame, id `<seq>-0`, field `f` = the frame's bytes.
    pub log: String,
    /// PUB/SUB channel: every published frame as `<epoch>:<seq>\n<bytes>`.
    pub channel: String,
    /// Hash: per node, the clients it has on the session's stream (see `watchers.rs`).
    pub watch: String,
}

impl Keys {
    pub fn of(session: &SessionId) -> Self {
        Self {
            meta: format!("spool:{{{session}}}:meta"),
            log: log(session),
            channel: channel(session),
            watch: format!("spool:{{{session}}}:watch"),
        }
    }
}

/// The session's stream log; also the scope its frames are sealed for (`seal.rs`).
pub(crate) fn log(session: &SessionId) -> String {
    format!("spool:{{{session}}}:log")
}

pub(crate) fn channel(session: &SessionId) -> String {
    format!("spool:{{{session}}}:live")
}

/// The session a channel name belongs to, for messages arriving on the node's link.
pub(crate) fn session_of(channel: &str) -> Option<SessionId> {
    let inner = channel.strip_prefix("spool:{")?.strip_suffix("}:live")?;
    inner.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_names_round_trip() {
        let session = SessionId::new();
        assert_eq!(session_of(&channel(&session)), Some(session.clone()));
        assert_eq!(session_of(&Keys::of(&session).log), None);
        assert_eq!(session_of("spool:{nope}:live"), None);
    }

    #[test]
    fn every_name_shares_the_hash_tag() {
        let session = SessionId::new();
        let keys = Keys::of(&session);
        let tag = format!("{{{session}}}");
        for name in [&keys.meta, &keys.log, &keys.channel, &keys.watch] {
            assert!(name.contains(&tag), "{name}");
        }
    }
}
