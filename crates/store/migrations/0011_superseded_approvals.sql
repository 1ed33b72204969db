-- An approval may end `superseded` (issue 14, "re-check before acting"): the file its
-- `write` or `edit` call would change was changed before the call ran, so a new
-- approval, with a preview of the change against the file as it is now, asks for the
-- same call instead.
--
-- SQLite cannot change a CHECK in place, so the table is rebuilt the documented way
-- (sqlite.org/lang_altertable.html, "other kinds of table schema changes"): a new
-- table, the rows copied, the old table dropped, the new one renamed, its indexes made
-- again. No table refers to approvals, so no foreign key has to be switched off.
CREATE TABLE approvals_new (
    id           TEXT    NOT NULL PRIMARY KEY,
    run_id       TEXT    NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    session_id   TEXT    NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    owner_id     TEXT    NOT NULL,
    tool_call_id TEXT    NOT NULL,
    tool         TEXT    NOT NULL,
    kind         TEXT    NOT NULL CHECK (kind IN ('confirm_action', 'select_option', 'provide_input')),
    payload      TEXT    NOT NULL CHECK (json_valid(payload)),
    status       TEXT    NOT NULL
        CHECK (status IN ('pending', 'resolved', 'expired', 'cancelled', 'superseded')),
    -- The Decision's JSON: "once", "always", "reject" or {"fill": {...}}.
    decision     TEXT    CHECK (decision IS NULL OR json_valid(decision)),
    message      TEXT,
    actor        TEXT,
    created_at   INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL,
    resolved_at  INTEGER,
    -- What the run needs to continue once the decision is in; opaque to the store.
    checkpoint   TEXT    NOT NULL CHECK (json_valid(checkpoint)),
    -- The durable "tool call started" mark (0010).
    started_at   INTEGER,
    CHECK (status <> 'pending' OR (decision IS NULL AND message IS NULL AND actor IS NULL AND resolved_at IS NULL)),
    CHECK (status = 'pending' OR resolved_at IS NOT NULL)
) STRICT;

INSERT INTO approvals_new (id, run_id, session_id, owner_id, tool_call_id, tool, kind, payload, status, decision,
                           message, actor, created_at, expires_at, resolved_at, checkpoint, started_at)
SELECT id, run_id, session_id, owner_id, tool_call_id, tool, kind, payload, status, decision,
       message, actor, created_at, expires_at, resolved_at, checkpoint, started_at
FROM approvals;

DROP TABLE approvals;
ALTER TABLE approvals_new RENAME TO approvals;

-- The indexes of 0002, on the new table.
CREATE INDEX approvals_by_session ON approvals (session_id, status, created_at);
CREATE INDEX approvals_by_status ON approvals (status, created_at);
CREATE INDEX approvals_by_run ON approvals (run_id);
