//! Records from rows, written once for both backends.
//!
//! Both backends read back the same columns with the same meaning, so turning a row
//! into a [`Project`], [`Session`], [`Run`], … lives here, behind [`Columns`]: the few
//! typed reads a decoder needs. Each backend implements it for its row type; the one
//! real difference is JSON, which SQLite keeps as checked text and PostgreSQL as
//! `JSONB`, and which both hand over as a [`Value`]. Everything that can be wrong with
//! a stored value (an id of the wrong shape, an unknown status, JSON that is not the
//! domain type) is a `Backend` error here, never a panic.

use crate::error::{db_error, from_db_int, parse_id};
use crate::message_codec;
use serde::de::DeserializeOwned;
use serde_json::Value;
use spool_engine::{Draft, IdempotencyClaim, Lease, Listener, LoginSession, StoreError};
use spool_protocol::{
    ApiToken, Approval, ApprovalKind, ApprovalStatus, IndexedMessage, Project, Run, RunError, RunStatus, Session,
    SessionMode, Usage,
};
use sqlx::Row;
use sqlx::postgres::PgRow;
use sqlx::sqlite::SqliteRow;
use sqlx::types::Json;

/// The typed reads the decoders below need from a row, by column name.
pub(crate) trait Columns {
    fn text(&self, column: &str) -> Result<String, StoreError>;
    fn text_opt(&self, column: &str) -> Result<Option<String>, StoreError>;
    fn int(&self, column: &str) -> Result<i64, StoreError>;
    fn int_opt(&self, column: &str) -> Result<Option<i64>, StoreError>;
    fn flag(&self, column: &str) -> Result<bool, StoreError>;
    fn json_opt(&self, column: &str) -> Result<Option<Value>, StoreError>;

    fn json(&self, column: &str) -> Result<Value, StoreError> {
        self.json_opt(column)?.ok_or_else(|| StoreError::Backend(format!("stored {column} is NULL")))
    }
}

impl Columns for SqliteRow {
    fn text(&self, column: &str) -> Result<String, StoreError> {
        self.try_get(column).map_err(db_error)
    }
    fn text_opt(&self, column: &str) -> Result<Option<String>, StoreError> {
        self.try_get(column).map_err(db_error)
    }
    fn int(&self, column: &str) -> Result<i64, StoreError> {
        self.try_get(column).map_err(db_error)
    }
    fn int_opt(&self, column: &str) -> Result<Option<i64>, StoreError> {
        self.try_get(column).map_err(db_error)
    }
    fn flag(&self, column: &str) -> Result<bool, StoreError> {
        self.try_get(column).map_err(db_error)
    }
    /// SQLite keeps JSON as text (its CHECKs make sure it parses); parse it here.
    fn json_opt(&self, column: &str) -> Result<Option<Value>, StoreError> {
        self.text_opt(column)?
            .map(|text| {
                serde_json::from_str(&text)
                    .map_err(|e| StoreError::Backend(format!("stored {column} is not JSON: {e}")))
            })
            .transpose()
    }
}

impl Columns for PgRow {
    fn text(&self, column: &str) -> Result<String, StoreError> {
        self.try_get(column).map_err(db_error)
    }
    fn text_opt(&self, column: &str) -> Result<Option<String>, StoreError> {
        self.try_get(column).map_err(db_error)
    }
    fn int(&self, column: &str) -> Result<i64, StoreError> {
        self.try_get(column).map_err(db_error)
    }
    fn int_opt(&self, column: &str) -> Result<Option<i64>, StoreError> {
        self.try_get(column).map_err(db_error)
    }
    fn flag(&self, column: &str) -> Result<bool, StoreError> {
        self.try_get(column).map_err(db_error)
    }
    fn json_opt(&self, column: &str) -> Result<Option<Value>, StoreError> {
        let json: Option<Json<Value>> = self.try_get(column).map_err(db_error)?;
        Ok(json.map(|Json(value)| value))
    }
}

/// A stored JSON value as the domain type it was written from.
fn from_json<T: DeserializeOwned>(value: Value, what: &str) -> Result<T, StoreError> {
    serde_json::from_value(value).map_err(|e| StoreError::Backend(format!("stored {what} does not decode: {e}")))
}

/// The `permissions` column of a session row.
pub(crate) fn permissions(row: &impl Columns) -> Result<Vec<spool_protocol::PermissionRule>, StoreError> {
    from_json(row.json("permissions")?, "permission rules")
}

/// The `guardrails` column of a session row (NULL: none of its own).
pub(crate) fn guardrails(row: &impl Columns) -> Result<Option<spool_protocol::Guardrails>, StoreError> {
    row.json_opt("guardrails")?.map(|v| from_json(v, "guardrails")).transpose()
}

pub(crate) fn project(row: &impl Columns) -> Result<Project, StoreError> {
    Ok(Project {
        id: parse_id(&row.text("id")?)?,
        owner_id: parse_id(&row.text("owner_id")?)?,
        name: row.text("name")?,
        path: row.text("path")?,
        created_at: row.int("created_at")?,
        updated_at: row.int("updated_at")?,
        dir: match (row.int_opt("dir_dev")?, row.int_opt("dir_ino")?) {
            (Some(dev), Some(ino)) => Some(spool_protocol::DirIdentity { dev: dev as u64, ino: ino as u64 }),
            _ => None,
        },
    })
}

pub(crate) fn session(row: &impl Columns) -> Result<Session, StoreError> {
    Ok(Session {
        id: parse_id(&row.text("id")?)?,
        project_id: parse_id(&row.text("project_id")?)?,
        owner_id: parse_id(&row.text("owner_id")?)?,
        title: row.text("title")?,
        title_set: row.flag("title_set")?,
        archived: row.flag("archived")?,
        permissions: permissions(row)?,
        model: row.text_opt("model")?,
        mode: {
            let mode = row.text("mode")?;
            SessionMode::parse(&mode).ok_or_else(|| StoreError::Backend(format!("unknown session mode {mode:?}")))?
        },
        read_index: row.int_opt("read_index")?.map(|i| from_db_int(i, "read index")).transpose()?,
        created_at: row.int("created_at")?,
        updated_at: row.int("updated_at")?,
    })
}

pub(crate) fn run(row: &impl Columns) -> Result<Run, StoreError> {
    let status = row.text("status")?;
    let status = RunStatus::parse(&status)
        .ok_or_else(|| StoreError::Backend(format!("stored run status `{status}` is unknown")))?;
    let error = match (row.text_opt("error_code")?, row.text_opt("error_message")?) {
        (Some(code), Some(message)) => Some(RunError { code, message }),
        (None, None) => None,
        // The schema's CHECK forbids half an error; finding one means the database
        // was edited behind the store's back.
        _ => return Err(StoreError::Backend("stored run error has a code or a message but not both".into())),
    };
    let input = from_db_int(row.int("usage_input")?, "input tokens")?;
    let output = from_db_int(row.int("usage_output")?, "output tokens")?;
    Ok(Run {
        id: parse_id(&row.text("id")?)?,
        session_id: parse_id(&row.text("session_id")?)?,
        owner_id: parse_id(&row.text("owner_id")?)?,
        request_id: row.text("request_id")?,
        status,
        user_message_index: from_db_int(row.int("user_message_index")?, "user message index")?,
        created_at: row.int("created_at")?,
        updated_at: row.int("updated_at")?,
        first_token_at: row.int_opt("first_token_at")?,
        ended_at: row.int_opt("ended_at")?,
        usage: usage(row.json("usage")?, input, output)?,
        error,
    })
}

pub(crate) fn queued(row: &impl Columns) -> Result<spool_engine::QueuedPrompt, StoreError> {
    let policy = row.text_opt("approval_policy")?;
    let approval_policy = policy
        .map(|p| {
            spool_engine::ApprovalPolicy::parse(&p)
                .ok_or_else(|| StoreError::Backend(format!("stored approval policy `{p}` is unknown")))
        })
        .transpose()?;
    let on_disconnect = row.text("on_disconnect")?;
    let on_disconnect = spool_engine::OnDisconnect::parse(&on_disconnect)
        .ok_or_else(|| StoreError::Backend(format!("stored disconnect policy `{on_disconnect}` is unknown")))?;
    Ok(spool_engine::QueuedPrompt {
        session_id: parse_id(&row.text("session_id")?)?,
        owner_id: parse_id(&row.text("owner_id")?)?,
        message: spool_protocol::frame::QueuedMessage {
            id: parse_id(&row.text("id")?)?,
            request_id: row.text("request_id")?,
            text: row.text("text")?,
            created_at: row.int("created_at")?,
            files: row.json_opt("files")?.map(|f| from_json(f, "queued files")).transpose()?.unwrap_or_default(),
        },
        approval_policy,
        on_disconnect,
    })
}

/// The full usage JSON; rows written before it existed hold `{}`, and then the two
/// plain columns are all there is.
fn usage(json: Value, input: u64, output: u64) -> Result<Usage, StoreError> {
    if json.as_object().is_some_and(|o| o.is_empty()) {
        return Ok(Usage { input, output, ..Usage::default() });
    }
    from_json(json, "usage")
}

/// An approval without its checkpoint (listings never need it).
pub(crate) fn approval(row: &impl Columns) -> Result<Approval, StoreError> {
    let status = row.text("status")?;
    let status = ApprovalStatus::parse(&status)
        .ok_or_else(|| StoreError::Backend(format!("stored approval status `{status}` is unknown")))?;
    Ok(Approval {
        id: parse_id(&row.text("id")?)?,
        run_id: parse_id(&row.text("run_id")?)?,
        session_id: parse_id(&row.text("session_id")?)?,
        owner_id: parse_id(&row.text("owner_id")?)?,
        tool_call_id: row.text("tool_call_id")?,
        tool: row.text("tool")?,
        kind: parse_approval_kind(&row.text("kind")?)?,
        payload: row.json("payload")?,
        status,
        decision: row.json_opt("decision")?.map(|d| from_json(d, "decision")).transpose()?,
        message: row.text_opt("message")?,
        actor: row.text_opt("actor")?.as_deref().map(parse_id).transpose()?,
        created_at: row.int("created_at")?,
        expires_at: row.int("expires_at")?,
        resolved_at: row.int_opt("resolved_at")?,
    })
}

/// The `kind` column's values: the serde names, spelled out so the schemas' CHECKs and
/// this match are the places to change together.
pub(crate) fn approval_kind_str(kind: ApprovalKind) -> &'static str {
    match kind {
        ApprovalKind::ConfirmAction => "confirm_action",
        ApprovalKind::SelectOption => "select_option",
        ApprovalKind::ProvideInput => "provide_input",
    }
}

fn parse_approval_kind(kind: &str) -> Result<ApprovalKind, StoreError> {
    Ok(match kind {
        "confirm_action" => ApprovalKind::ConfirmAction,
        "select_option" => ApprovalKind::SelectOption,
        "provide_input" => ApprovalKind::ProvideInput,
        other => return Err(StoreError::Backend(format!("stored approval kind `{other}` is unknown"))),
    })
}

/// A token joined with its user's name (`user_name`).
pub(crate) fn token(row: &impl Columns) -> Result<ApiToken, StoreError> {
    Ok(ApiToken {
        id: parse_id(&row.text("id")?)?,
        user_id: parse_id(&row.text("user_id")?)?,
        user_name: row.text("user_name")?,
        hash: row.text("hash")?,
        created_at: row.int("created_at")?,
        revoked_at: row.int_opt("revoked_at")?,
    })
}

pub(crate) fn login(row: &impl Columns) -> Result<LoginSession, StoreError> {
    Ok(LoginSession {
        id: parse_id(&row.text("id")?)?,
        token_id: parse_id(&row.text("token_id")?)?,
        user_id: parse_id(&row.text("user_id")?)?,
        hash: row.text("hash")?,
        created_at: row.int("created_at")?,
        expires_at: row.int("expires_at")?,
        ended_at: row.int_opt("ended_at")?,
    })
}

pub(crate) fn listener(row: &impl Columns) -> Result<Listener, StoreError> {
    Ok(Listener {
        node_id: row.text("node_id")?,
        addr: row.text("addr")?,
        public: row.flag("public")?,
        updated_at: row.int("updated_at")?,
    })
}

pub(crate) fn lease(row: &impl Columns) -> Result<Lease, StoreError> {
    Ok(Lease {
        session_id: parse_id(&row.text("session_id")?)?,
        node_id: row.text("node_id")?,
        expires_at: row.int("expires_at")?,
        epoch: row.int("epoch")?,
    })
}

/// What an idempotency row says to a caller that did not claim it: the kept answer,
/// or that the claimer is still working.
pub(crate) fn idempotency_state(row: &impl Columns) -> Result<IdempotencyClaim, StoreError> {
    Ok(match row.text_opt("answer")? {
        Some(answer) => IdempotencyClaim::Done(answer),
        None => IdempotencyClaim::InProgress,
    })
}

/// Folds joined message rows (`id, idx, role, meta, kind, data`: one row per part, or
/// one with NULL part columns for a message without content) into messages, keeping
/// the query's order, which must group rows by message and sort parts by position.
pub(crate) fn messages<R: Columns>(rows: &[R]) -> Result<Vec<IndexedMessage>, StoreError> {
    struct Pending {
        id: String,
        index: i64,
        role: String,
        meta: Value,
        parts: Vec<(String, Value)>,
    }
    fn finish(p: Pending) -> Result<IndexedMessage, StoreError> {
        Ok(IndexedMessage {
            id: parse_id(&p.id)?,
            index: from_db_int(p.index, "message index")?,
            message: message_codec::decode(&p.role, p.meta, p.parts)?,
        })
    }

    let mut messages = Vec::new();
    let mut pending: Option<Pending> = None;
    for row in rows {
        let id = row.text("id")?;
        if pending.as_ref().is_none_or(|p| p.id != id) {
            if let Some(done) = pending.take() {
                messages.push(finish(done)?);
            }
            pending = Some(Pending {
                id,
                index: row.int("idx")?,
                role: row.text("role")?,
                meta: row.json("meta")?,
                parts: vec![],
            });
        }
        if let (Some(kind), Some(data), Some(p)) = (row.text_opt("kind")?, row.json_opt("data")?, pending.as_mut()) {
            p.parts.push((kind, data));
        }
    }
    if let Some(done) = pending {
        messages.push(finish(done)?);
    }
    Ok(messages)
}

/// A streaming draft row (`message_drafts`).
pub(crate) fn draft(row: &impl Columns) -> Result<Draft, StoreError> {
    Ok(Draft {
        session_id: parse_id(&row.text("session_id")?)?,
        run_id: parse_id(&row.text("run_id")?)?,
        owner_id: parse_id(&row.text("owner_id")?)?,
        message: IndexedMessage {
            id: parse_id(&row.text("message_id")?)?,
            index: from_db_int(row.int("idx")?, "message index")?,
            message: serde_json::from_value(row.json("message")?)
                .map_err(|e| StoreError::Backend(format!("stored draft is unreadable: {e}")))?,
        },
    })
}
