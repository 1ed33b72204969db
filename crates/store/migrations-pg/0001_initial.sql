-- Spool's durable records on PostgreSQL: the schema SQLite reaches through
-- migrations 0001-0007, in one step (nothing was ever deployed on PostgreSQL before).
--
-- The same habits as the SQLite schema: owner_id on every record so an ownership
-- check never needs a join, children cascading from their parent, every foreign key
-- column leading some index, and CHECKs for what a row can never be. The types are
-- PostgreSQL's own: BIGINT for milliseconds, counts and indexes, BOOLEAN for flags,
-- JSONB for the JSON documents (validated on write, like SQLite's json_valid CHECKs).
-- Ids are TEXT COLLATE "C": they compare byte by byte, so ordering by id is ordering
-- by creation time whatever the database's locale is.

CREATE TABLE users (
    id         TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    name       TEXT   NOT NULL UNIQUE,
    created_at BIGINT NOT NULL
);

CREATE TABLE tokens (
    id         TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    user_id    TEXT COLLATE "C" NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    hash       TEXT   NOT NULL UNIQUE CHECK (length(hash) = 64),
    created_at BIGINT NOT NULL,
    revoked_at BIGINT
);

CREATE INDEX tokens_by_user ON tokens (user_id);

CREATE TABLE projects (
    id         TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    owner_id   TEXT COLLATE "C" NOT NULL,
    name       TEXT   NOT NULL,
    -- Canonical absolute path; one registration per owner and directory.
    path       TEXT   NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    UNIQUE (owner_id, path)
);

CREATE TABLE sessions (
    id          TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    project_id  TEXT COLLATE "C" NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    owner_id    TEXT COLLATE "C" NOT NULL,
    title       TEXT    NOT NULL,
    title_set   BOOLEAN NOT NULL,
    archived    BOOLEAN NOT NULL,
    -- The session's own permission rules, as the JSON array the API takes.
    permissions JSONB   NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(permissions) = 'array'),
    -- The configured model the session uses (NULL: the server's default).
    model       TEXT,
    -- The highest message index a person has read.
    read_index  BIGINT  CHECK (read_index >= 0),
    created_at  BIGINT  NOT NULL,
    updated_at  BIGINT  NOT NULL
);

-- The session list (one project, one archived flag, newest first) and the cascade.
CREATE INDEX sessions_by_project ON sessions (project_id, archived, updated_at);

-- A committed message without its content: `meta` holds every other field.
CREATE TABLE messages (
    id         TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    session_id TEXT COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    owner_id   TEXT COLLATE "C" NOT NULL,
    -- Absolute position in the session, never renumbered: the unique pair is what
    -- makes a second writer of the same index fail instead of forking history.
    idx        BIGINT NOT NULL CHECK (idx >= 0),
    role       TEXT   NOT NULL CHECK (role IN ('user', 'assistant', 'toolResult')),
    meta       JSONB  NOT NULL CHECK (jsonb_typeof(meta) = 'object'),
    created_at BIGINT NOT NULL,
    UNIQUE (session_id, idx)
);

-- A message's content blocks, one row each; `data` is the block without its `type`.
CREATE TABLE parts (
    id         TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    message_id TEXT COLLATE "C" NOT NULL REFERENCES messages (id) ON DELETE CASCADE,
    session_id TEXT COLLATE "C" NOT NULL,
    owner_id   TEXT COLLATE "C" NOT NULL,
    position   BIGINT NOT NULL CHECK (position >= 0),
    kind       TEXT   NOT NULL CHECK (kind IN ('text', 'thinking', 'toolCall')),
    data       JSONB  NOT NULL CHECK (jsonb_typeof(data) = 'object'),
    UNIQUE (message_id, position)
);

CREATE TABLE runs (
    id                 TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    session_id         TEXT COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    owner_id           TEXT COLLATE "C" NOT NULL,
    -- The client's idempotency key: a retried prompt finds the run it started.
    request_id         TEXT   NOT NULL,
    status             TEXT   NOT NULL
        CHECK (status IN ('running', 'interrupted', 'completed', 'failed', 'cancelled')),
    user_message_index BIGINT NOT NULL CHECK (user_message_index >= 0),
    created_at         BIGINT NOT NULL,
    updated_at         BIGINT NOT NULL,
    first_token_at     BIGINT,
    ended_at           BIGINT,
    usage_input        BIGINT NOT NULL CHECK (usage_input >= 0),
    usage_output       BIGINT NOT NULL CHECK (usage_output >= 0),
    -- Every usage field (reasoning and cache tokens, cost); the two above are for queries.
    usage              JSONB  NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(usage) = 'object'),
    error_code         TEXT,
    error_message      TEXT,
    CHECK ((error_code IS NULL) = (error_message IS NULL)),
    UNIQUE (session_id, request_id)
);

-- Start-up recovery and lost nodes look for runs still marked running.
CREATE INDEX runs_by_status ON runs (status);

CREATE TABLE approvals (
    id           TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    run_id       TEXT COLLATE "C" NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    session_id   TEXT COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    owner_id     TEXT COLLATE "C" NOT NULL,
    tool_call_id TEXT   NOT NULL,
    tool         TEXT   NOT NULL,
    kind         TEXT   NOT NULL CHECK (kind IN ('confirm_action', 'select_option', 'provide_input')),
    payload      JSONB  NOT NULL,
    status       TEXT   NOT NULL CHECK (status IN ('pending', 'resolved', 'expired', 'cancelled')),
    -- The Decision's JSON: "once", "always", "reject" or {"fill": {...}}.
    decision     JSONB,
    message      TEXT,
    actor        TEXT COLLATE "C",
    created_at   BIGINT NOT NULL,
    expires_at   BIGINT NOT NULL,
    resolved_at  BIGINT,
    -- What the run needs to continue once the decision is in; opaque to the store.
    checkpoint   JSONB  NOT NULL,
    CHECK (status <> 'pending' OR (decision IS NULL AND message IS NULL AND actor IS NULL AND resolved_at IS NULL)),
    CHECK (status = 'pending' OR resolved_at IS NOT NULL)
);

CREATE INDEX approvals_by_session ON approvals (session_id, status, created_at);
CREATE INDEX approvals_by_status ON approvals (status, created_at);
CREATE INDEX approvals_by_run ON approvals (run_id);

-- One row per idempotency key; a row without a response is a claim in progress.
CREATE TABLE idempotency (
    scope           TEXT   NOT NULL,
    key             TEXT   NOT NULL,
    response_status BIGINT CHECK (response_status BETWEEN 100 AND 599),
    response_body   TEXT,
    created_at      BIGINT NOT NULL,
    CHECK ((response_status IS NULL) = (response_body IS NULL)),
    PRIMARY KEY (scope, key)
);

-- Confirmed facts and the compaction summary: one document per session.
CREATE TABLE session_memory (
    session_id TEXT COLLATE "C" NOT NULL PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
    owner_id   TEXT COLLATE "C" NOT NULL,
    memory     JSONB  NOT NULL,
    updated_at BIGINT NOT NULL
);

-- Which node runs a session, until when (ms since the epoch).
CREATE TABLE session_leases (
    session_id TEXT COLLATE "C" NOT NULL PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
    node_id    TEXT   NOT NULL CHECK (length(node_id) > 0),
    expires_at BIGINT NOT NULL
);

CREATE INDEX session_leases_by_expiry ON session_leases (expires_at);
