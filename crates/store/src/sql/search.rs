//! Session search: the owner's sessions whose title or message text contains a string.
//!
//! What it costs: a `LIKE '%…%'` scan, not an index. The candidate sessions are the
//! owner's (the `sessions.owner_id` filter), and for each one the text parts are read
//! until one matches (a correlated subquery with `LIMIT 1`), so a search reads at most
//! every text part of that one user, stopping per session at the first hit and overall
//! once `limit` sessions have matched in `updated_at` order. That is fine for the
//! thousands of sessions one person has; a full-text index (SQLite FTS5, PostgreSQL
//! `pg_trgm`) is the step after, and would change only this module and a migration.
//!
//! The first matching text part is looked for twice, once for its text and once for
//! its message's index (a correlated subquery gives one column); the second reads
//! only the sessions the first found something in.
//!
//! Case folding is `LOWER()` on both sides: full Unicode on PostgreSQL, ASCII only on
//! SQLite (its built-in `lower`), so on SQLite "É" does not find "é". `%`, `_` and `\`
//! in the needle are escaped, so they match themselves.
//!
//! A search runs under a time limit the database itself enforces (SQLite's progress
//! handler, PostgreSQL's `statement_timeout`): a scan cut short stops reading at once
//! and gives its connection back, instead of running on after its caller gave up.

use super::dialect::{self, PART_TEXT, Pool};
use crate::error::db_error;
use crate::rows::{self, Columns};
use spool_engine::{SessionMatch, StoreError};
use spool_protocol::time::Millis;
use spool_protocol::{SessionId, UserId};

/// How a search the time limit cut short fails (followed by the database's words).
const TIME_LIMIT_CUT: &str = "the search was stopped at its time limit";

const COLUMNS: &str =
    "s.id, s.project_id, s.owner_id, s.title, s.title_set, s.archived, s.permissions, s.model, s.mode,
                       s.read_index, s.created_at, s.updated_at";

/// `needle` as a `LIKE … ESCAPE '\'` pattern matching it anywhere, lower-cased.
fn contains_pattern(needle: &str) -> String {
    let mut pattern = String::with_capacity(needle.len() + 2);
    pattern.push('%');
    for c in needle.to_lowercase().chars() {
        if matches!(c, '%' | '_' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push('%');
    pattern
}

pub(crate) async fn sessions(
    pool: &Pool,
    owner: &UserId,
    needle: &str,
    before: Option<(Millis, SessionId)>,
    limit: u32,
    time_limit: std::time::Duration,
) -> Result<Vec<SessionMatch>, StoreError> {
    // Without a cursor, a position after every real one: no NULL parameter to type.
    let (before_at, before_id) = match &before {
        Some((at, id)) => (*at, id.as_str().to_owned()),
        None => (Millis::MAX, String::new()),
    };
    let sql = format!(
        "SELECT t.*,
                CASE WHEN t.hit IS NULL THEN NULL ELSE
                  (SELECT m.idx FROM parts p JOIN messages m ON m.id = p.message_id
                    WHERE p.session_id = t.id AND p.kind = 'text' AND LOWER({PART_TEXT}) LIKE $2 ESCAPE '\\'
                    ORDER BY m.idx LIMIT 1)
                END AS hit_index
         FROM (
           SELECT {COLUMNS},
                  (SELECT {PART_TEXT} FROM parts p JOIN messages m ON m.id = p.message_id
                    WHERE p.session_id = s.id AND p.kind = 'text' AND LOWER({PART_TEXT}) LIKE $2 ESCAPE '\\'
                    ORDER BY m.idx LIMIT 1) AS hit
             FROM sessions s
            WHERE s.owner_id = $1 AND (s.updated_at < $3 OR (s.updated_at = $3 AND s.id < $4))
         ) t
         WHERE LOWER(t.title) LIKE $2 ESCAPE '\\' OR t.hit IS NOT NULL
         ORDER BY t.updated_at DESC, t.id DESC
         LIMIT $5"
    );
    let mut conn = dialect::time_limited(pool, time_limit).await?;
    let found = sqlx::query(&sql)
        .bind(owner.as_str())
        .bind(contains_pattern(needle))
        .bind(before_at)
        .bind(before_id)
        .bind(i64::from(limit))
        .fetch_all(&mut *conn)
        .await;
    dialect::end_time_limit(conn).await;
    found
        .map_err(|e| match dialect::cut_by_time_limit(&e) {
            // One text for both databases' cut, whatever words the database chose.
            true => StoreError::Backend(format!("{TIME_LIMIT_CUT} ({e})")),
            false => db_error(e),
        })?
        .iter()
        .map(|row| {
            let message_index = row.int_opt("hit_index")?.and_then(|i| u64::try_from(i).ok());
            Ok(SessionMatch { session: rows::session(row)?, text: row.text_opt("hit")?, message_index })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::contains_pattern;

    #[test]
    fn like_wildcards_in_the_needle_match_themselves() {
        assert_eq!(contains_pattern("50%_a\\B"), "%50\\%\\_a\\\\b%");
    }
}
