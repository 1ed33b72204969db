//! Session search and a session's runs, for the web UI's sidebar search box and its
//! per-answer usage line: `GET /api/sessions/search` and `GET /api/sessions/:id/runs`.
//!
//! Search is server-side and paged by a keyset cursor (`updated_at.id` of the last
//! session of a page), so a page costs the same however deep it is and a session that
//! changes between two pages moves instead of being listed twice in one order. The
//! match itself is the store's (`Store::search_sessions`); here are the limits, the
//! cursor and the snippet.

use crate::engine::Sessions;
use crate::error::{EngineError, Result};
use crate::store::SessionMatch;
use serde::Serialize;
use spool_protocol::api::SessionInfo;
use spool_protocol::time::Millis;
use spool_protocol::{SessionId, UserId};

/// Longest query, in characters.
pub const MAX_SEARCH_QUERY: usize = 200;
/// Most sessions one page returns.
pub const MAX_SEARCH_LIMIT: u32 = 100;
/// Sessions per page when the client does not say.
pub const DEFAULT_SEARCH_LIMIT: u32 = 20;
/// Characters of context either side of the match in a snippet.
const SNIPPET_CONTEXT: usize = 40;

/// One session a search found.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SearchHit {
    #[serde(flatten)]
    pub session: SessionInfo,
    /// A short piece of the text around the first match, `…` where it was cut; the
    /// title when only the title matched.
    pub snippet: String,
    /// `title` or `message`: what matched.
    pub matched: &'static str,
    /// The index of the first message that matched, where the web UI scrolls to when
    /// the result is opened; absent when only the title matched.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_index: Option<u64>,
}

/// A page of search results, newest activity first.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SearchPage {
    pub sessions: Vec<SearchHit>,
    /// Pass as `cursor` for the next page; absent on the last one.
    pub next_cursor: Option<String>,
}

impl Sessions<'_> {
    /// The owner's sessions whose title or message text contains `query`
    /// (case-insensitive), newest activity first, `limit` per page after `cursor`.
    pub async fn search(
        &self,
        owner: &UserId,
        query: &str,
        limit: Option<u32>,
        cursor: Option<&str>,
    ) -> Result<SearchPage> {
        let query = query.trim();
        if query.is_empty() || query.chars().count() > MAX_SEARCH_QUERY || query.chars().any(char::is_control) {
            return Err(EngineError::invalid(
                "invalid_query",
                format!("q must be 1 to {MAX_SEARCH_QUERY} characters without control characters"),
            ));
        }
        let limit = limit.unwrap_or(DEFAULT_SEARCH_LIMIT);
        if !(1..=MAX_SEARCH_LIMIT).contains(&limit) {
            return Err(EngineError::invalid("invalid_limit", format!("limit must be 1 to {MAX_SEARCH_LIMIT}")));
        }
        let before = cursor.map(parse_cursor).transpose()?;
        // One more than asked says whether there is a next page without a count query.
        let mut found = self.search_bounded(owner, query, before, limit + 1).await?;
        let more = found.len() > limit as usize;
        found.truncate(limit as usize);
        let next_cursor =
            more.then(|| found.last().map(|m| format!("{}.{}", m.session.updated_at, m.session.id))).flatten();
        let waiting = self.engine.waiting_among(found.iter().map(|m| &m.session)).await?;
        let sessions = found
            .into_iter()
            .map(|m| {
                let (snippet, matched) = match &m.text {
                    Some(text) => (snippet(text, query), "message"),
                    None => (m.session.title.clone(), "title"),
                };
                SearchHit {
                    session: self.engine.session_info(m.session, &waiting),
                    snippet,
                    matched,
                    message_index: m.text.is_some().then_some(m.message_index).flatten(),
                }
            })
            .collect();
        Ok(SearchPage { sessions, next_cursor })
    }

    /// The store's search within the search limits (see [`crate::search_slots`]): a slot
    /// of the user's and of the node's, held until the store has stopped, and the time
    /// limit, enforced here for the caller and in the database for the scan.
    async fn search_bounded(
        &self,
        owner: &UserId,
        query: &str,
        before: Option<(Millis, SessionId)>,
        limit: u32,
    ) -> Result<Vec<SessionMatch>> {
        let limits = &self.engine.inner.config.search;
        let slot = self.engine.inner.searches.admit(owner, limits).await?;
        if let Some(hold) = &limits.hold {
            (hold.0)(owner).await;
        }
        let time_limit = limits.time_limit;
        let started = std::time::Instant::now();
        let (store, owner, query) = (self.engine.inner.store.clone(), owner.clone(), query.to_owned());
        // A task of its own, so the slot goes with the store's work, not with a caller
        // that stopped waiting for it.
        let search = tokio::spawn(async move {
            let found = store.search_sessions(&owner, &query, before, limit, time_limit).await;
            drop(slot);
            found
        });
        let timed_out = || EngineError::Unavailable {
            code: "search_timeout",
            message: format!(
                "the search ran for {} s, the most a search may, and was stopped: search for a longer or rarer word",
                time_limit.as_secs_f64()
            ),
        };
        match tokio::time::timeout(time_limit, search).await {
            Err(_) => Err(timed_out()),
            Ok(Err(join)) => Err(EngineError::Store(crate::StoreError::Backend(format!("the search failed: {join}")))),
            // The database's own cut comes as an error at about the same time; and a
            // search that ran past the limit is over it even if it found its answer
            // in the moment the timer took to notice.
            Ok(Ok(_)) if started.elapsed() > time_limit => Err(timed_out()),
            Ok(Ok(found)) => Ok(found?),
        }
    }
}

/// `updated_at.ses_…` back into a position; anything else is a 400, not an empty page.
fn parse_cursor(raw: &str) -> Result<(Millis, SessionId)> {
    let bad = || EngineError::invalid("invalid_cursor", "cursor must be a nextCursor this search returned");
    let (at, id) = raw.split_once('.').ok_or_else(bad)?;
    if at.is_empty() || !at.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    Ok((at.parse().map_err(|_| bad())?, id.parse().map_err(|_| bad())?))
}

/// Up to [`SNIPPET_CONTEXT`] characters either side of the first case-insensitive match
/// of `query` in `text`, whitespace collapsed, with `…` where it was cut.
fn snippet(text: &str, query: &str) -> String {
    let flat: Vec<char> = text.split_whitespace().collect::<Vec<_>>().join(" ").chars().collect();
    let lower: Vec<char> = flat.iter().flat_map(|c| c.to_lowercase()).collect();
    let needle: Vec<char> = query.split_whitespace().collect::<Vec<_>>().join(" ").to_lowercase().chars().collect();
    // Lower-casing may change the length of a few characters; then the match position
    // is approximate, which is fine for a snippet (it is clamped to the text).
    let at = if lower.len() == flat.len() {
        lower.windows(needle.len().max(1)).position(|w| w == needle.as_slice()).unwrap_or(0)
    } else {
        0
    };
    let start = at.saturating_sub(SNIPPET_CONTEXT);
    let end = (at + needle.len() + SNIPPET_CONTEXT).min(flat.len());
    let mut out = String::new();
    if start > 0 {
        out.push('…');
    }
    out.extend(&flat[start..end]);
    if end < flat.len() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snippets_centre_on_the_match_and_mark_cuts() {
        let text = format!("{} needle {}", "a ".repeat(50), "b ".repeat(50));
        let s = snippet(&text, "NEEDLE");
        assert!(s.starts_with('…') && s.ends_with('…'), "{s}");
        assert!(s.contains("needle"));
        assert!(s.chars().count() <= 2 * SNIPPET_CONTEXT + "needle".len() + 2);
        assert_eq!(snippet("short\n\ntext", "text"), "short text");
    }

    #[test]
    fn cursors_are_strict() {
        assert!(parse_cursor("12").is_err());
        assert!(parse_cursor("+1.ses_x").is_err());
        assert!(parse_cursor("1.nope").is_err());
    }
}
