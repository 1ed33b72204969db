//! Step snapshot records (the engine's `snapshots`): one row per turn of a run, written
//! before the step's first call and completed after its last. The trees themselves
//! live in the project's shadow repository on the node that took them.

use super::dialect::Pool;
use crate::error::db_error;
use crate::rows::Columns;
use spool_engine::snapshots::Skipped;
use spool_engine::store::StepSnapshot;
use spool_engine::{LeaseFence, StoreError};
use spool_protocol::time::Millis;
use spool_protocol::{ProjectId, RunId, SessionId};
use sqlx::types::Json;

/// Held to `fence` when a run writes it (see `leases`), as is [`finish`].
pub(crate) async fn insert(pool: &Pool, fence: Option<&LeaseFence>, s: &StepSnapshot) -> Result<(), StoreError> {
    let mut tx = super::leases::begin(pool, fence).await?;
    sqlx::query(
        "INSERT INTO step_snapshots
             (run_id, turn, session_id, owner_id, project_id, message_index, before_tree, after_tree,
              before_skipped, after_skipped, node_id, created_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
         ON CONFLICT (run_id, turn) DO NOTHING",
    )
    .bind(s.run_id.as_str())
    .bind(i64::from(s.turn))
    .bind(s.session_id.as_str())
    .bind(s.owner_id.as_str())
    .bind(s.project_id.as_str())
    .bind(number(s.message_index)?)
    .bind(&s.before_tree)
    .bind(s.after_tree.as_deref())
    .bind(Json(&s.before_skipped))
    .bind(s.after_skipped.as_ref().map(Json))
    .bind(&s.node_id)
    .bind(s.created_at)
    .execute(&mut *tx)
    .await
    .map_err(db_error)?;
    tx.commit().await.map_err(db_error)
}

pub(crate) async fn finish(
    pool: &Pool,
    fence: Option<&LeaseFence>,
    run: &RunId,
    turn: u32,
    after_tree: &str,
    skipped: &Skipped,
) -> Result<Option<u64>, StoreError> {
    let mut tx = super::leases::begin(pool, fence).await?;
    let index: Option<i64> = sqlx::query_scalar(
        "UPDATE step_snapshots SET after_tree = $3, after_skipped = $4
         WHERE run_id = $1 AND turn = $2 RETURNING message_index",
    )
    .bind(run.as_str())
    .bind(i64::from(turn))
    .bind(after_tree)
    .bind(Json(skipped))
    .fetch_optional(&mut *tx)
    .await
    .map_err(db_error)?;
    tx.commit().await.map_err(db_error)?;
    index.map(unsigned).transpose()
}

pub(crate) async fn list(pool: &Pool, session: &SessionId) -> Result<Vec<StepSnapshot>, StoreError> {
    let rows = sqlx::query(
        "SELECT run_id, turn, session_id, owner_id, project_id, message_index, before_tree, after_tree,
                before_skipped, after_skipped, node_id, created_at
         FROM step_snapshots WHERE session_id = $1 AND branch = 0 ORDER BY message_index, created_at",
    )
    .bind(session.as_str())
    .fetch_all(pool)
    .await
    .map_err(db_error)?;
    rows.iter()
        .map(|row| {
            let bad = |what: &str| StoreError::Backend(format!("a stored step snapshot's {what} does not parse"));
            let skipped = |value: serde_json::Value| serde_json::from_value(value).map_err(|_| bad("skipped list"));
            Ok(StepSnapshot {
                run_id: row.text("run_id")?.parse().map_err(|_| bad("run id"))?,
                turn: u32::try_from(row.int("turn")?).map_err(|_| bad("turn"))?,
                session_id: row.text("session_id")?.parse().map_err(|_| bad("session id"))?,
                owner_id: row.text("owner_id")?.parse().map_err(|_| bad("owner id"))?,
                project_id: row.text("project_id")?.parse().map_err(|_| bad("project id"))?,
                message_index: unsigned(row.int("message_index")?)?,
                before_tree: row.text("before_tree")?,
                before_skipped: skipped(row.json("before_skipped")?)?,
                after_tree: row.text_opt("after_tree")?,
                after_skipped: row.json_opt("after_skipped")?.map(skipped).transpose()?,
                node_id: row.text("node_id")?,
                created_at: row.int("created_at")?,
            })
        })
        .collect()
}

pub(crate) async fn prune(pool: &Pool, before: Millis) -> Result<u64, StoreError> {
    let done = sqlx::query("DELETE FROM step_snapshots WHERE created_at < $1")
        .bind(before)
        .execute(pool)
        .await
        .map_err(db_error)?;
    Ok(done.rows_affected())
}

/// The trees `project`'s records name. A pending revert's state is read here, not in
/// SQL, because the two databases spell a JSON field's extraction differently.
pub(crate) async fn trees(pool: &Pool, project: &ProjectId) -> Result<Vec<String>, StoreError> {
    let mut trees: Vec<String> = sqlx::query_scalar(
        "SELECT before_tree FROM step_snapshots WHERE project_id = $1
         UNION SELECT after_tree FROM step_snapshots WHERE project_id = $1 AND after_tree IS NOT NULL",
    )
    .bind(project.as_str())
    .fetch_all(pool)
    .await
    .map_err(db_error)?;
    let reverts = sqlx::query(
        "SELECT r.state FROM session_reverts r JOIN sessions s ON s.id = r.session_id WHERE s.project_id = $1",
    )
    .bind(project.as_str())
    .fetch_all(pool)
    .await
    .map_err(db_error)?;
    // What unrevert reads: the files before the revert (`pre`) and what the revert
    // wrote (`target`, a step's tree that retention may delete the step of first).
    for row in &reverts {
        let state = row.json("state")?;
        for key in ["pre", "target"] {
            if let Some(tree) = state.get(key).and_then(|tree| tree.as_str()) {
                trees.push(tree.to_owned());
            }
        }
    }
    trees.sort();
    trees.dedup();
    Ok(trees)
}

fn number(n: u64) -> Result<i64, StoreError> {
    i64::try_from(n).map_err(|_| StoreError::Backend(format!("{n} does not fit a stored integer")))
}

fn unsigned(n: i64) -> Result<u64, StoreError> {
    u64::try_from(n).map_err(|_| StoreError::Backend(format!("a stored message index is negative: {n}")))
}
