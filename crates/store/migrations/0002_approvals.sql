-- Approvals (a run stopped until a person decides), per-session permission rules and
-- idempotency keys.
--
-- The same habits as 0001: STRICT tables, owner_id on every record, ON DELETE CASCADE
-- from the parent, and every foreign key column leading some index.

-- A session's own permission rules, as the JSON array the API takes. Existing
-- sessions get none. SQLite checks a CHECK added this way against the rows already
-- there, so the column is valid in every row from the moment it exists.
ALTER TABLE sessions ADD COLUMN permissions TEXT NOT NULL DEFAULT '[]'
    CHECK (json_valid(permissions) AND json_type(permissions) = 'array');

CREATE TABLE approvals (
    id           TEXT    NOT NULL PRIMARY KEY,
    run_id       TEXT    NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    session_id   TEXT    NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    owner_id     TEXT    NOT NULL,
    tool_call_id TEXT    NOT NULL,
    tool         TEXT    NOT NULL,
    kind         TEXT    NOT NULL CHECK (kind IN ('confirm_action', 'select_option', 'provide_input')),
    payload      TEXT    NOT NULL CHECK (json_valid(payload)),
    status       TEXT    NOT NULL CHECK (status IN ('pending', 'resolved', 'expired', 'cancelled')),
    -- The Decision's JSON: "once", "always", "reject" or {"fill": {...}}.
    decision     TEXT    CHECK (decision IS NULL OR json_valid(decision)),
    message      TEXT,
    actor        TEXT,
    created_at   INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL,
    resolved_at  INTEGER,
    -- What the run needs to continue once the decision is in; opaque to the store.
    checkpoint   TEXT    NOT NULL CHECK (json_valid(checkpoint)),
    -- A pending approval has no outcome yet, a settled one always has its time: a
    -- settle that would break either is refused by the database, not stored.
    CHECK (status <> 'pending' OR (decision IS NULL AND message IS NULL AND actor IS NULL AND resolved_at IS NULL)),
    CHECK (status = 'pending' OR resolved_at IS NOT NULL)
) STRICT;

-- A session's pending approvals, oldest first; also the cascade from sessions.
CREATE INDEX approvals_by_session ON approvals (session_id, status, created_at);
-- Every pending approval at start-up, to re-arm expiry timers.
CREATE INDEX approvals_by_status ON approvals (status, created_at);
-- The cascade from runs.
CREATE INDEX approvals_by_run ON approvals (run_id);

-- One row per idempotency key. A row without a response is a claim in progress; the
-- response columns are both set (once, by completing) or both empty.
CREATE TABLE idempotency (
    scope           TEXT    NOT NULL,
    key             TEXT    NOT NULL,
    response_status INTEGER CHECK (response_status BETWEEN 100 AND 599),
    response_body   TEXT,
    created_at      INTEGER NOT NULL,
    CHECK ((response_status IS NULL) = (response_body IS NULL)),
    PRIMARY KEY (scope, key)
) STRICT;

