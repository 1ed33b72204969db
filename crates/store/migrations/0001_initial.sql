-- Spool's durable records on SQLite.
--
-- Every record carries owner_id so an ownership check never needs a join. Children
-- reference their parent with ON DELETE CASCADE: deleting a project or a session
-- removes everything under it in the same statement. Each foreign key's column leads
-- some index (a UNIQUE constraint or an explicit one), so a cascade never scans a
-- whole child table. Tables are STRICT so a value of the wrong type is refused at
-- write time instead of being read back as a surprise.

CREATE TABLE users (
    id         TEXT    NOT NULL PRIMARY KEY,
    name       TEXT    NOT NULL UNIQUE,
    created_at INTEGER NOT NULL
) STRICT;

CREATE TABLE projects (
    id         TEXT    NOT NULL PRIMARY KEY,
    owner_id   TEXT    NOT NULL,
    name       TEXT    NOT NULL,
    -- Canonical absolute path; one registration per owner and directory.
    path       TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    UNIQUE (owner_id, path)
) STRICT;

CREATE TABLE sessions (
    id         TEXT    NOT NULL PRIMARY KEY,
    project_id TEXT    NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    owner_id   TEXT    NOT NULL,
    title      TEXT    NOT NULL,
    title_set  INTEGER NOT NULL CHECK (title_set IN (0, 1)),
    archived   INTEGER NOT NULL CHECK (archived IN (0, 1)),
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
) STRICT;

-- Serves the session list (one project, one archived flag, newest first) and the
-- cascade from projects.
CREATE INDEX sessions_by_project ON sessions (project_id, archived, updated_at);

-- A committed message without its content: `meta` is the JSON of every other field
-- of the message (timestamp, and for an assistant stopReason, usage, model,
-- errorMessage; for a tool result toolCallId, toolName, isError).
CREATE TABLE messages (
    id         TEXT    NOT NULL PRIMARY KEY,
    session_id TEXT    NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    owner_id   TEXT    NOT NULL,
    -- Absolute position in the session, never renumbered: the unique pair is what
    -- makes a second writer of the same index fail instead of forking history.
    idx        INTEGER NOT NULL CHECK (idx >= 0),
    role       TEXT    NOT NULL CHECK (role IN ('user', 'assistant', 'toolResult')),
    meta       TEXT    NOT NULL CHECK (json_valid(meta)),
    created_at INTEGER NOT NULL,
    UNIQUE (session_id, idx)
) STRICT;

-- A message's content blocks, one row each, reassembled in position order. `data`
-- is the block's JSON without its `type` tag, which lives in `kind`.
CREATE TABLE parts (
    id         TEXT    NOT NULL PRIMARY KEY,
    message_id TEXT    NOT NULL REFERENCES messages (id) ON DELETE CASCADE,
    session_id TEXT    NOT NULL,
    owner_id   TEXT    NOT NULL,
    position   INTEGER NOT NULL CHECK (position >= 0),
    kind       TEXT    NOT NULL CHECK (kind IN ('text', 'thinking', 'toolCall')),
    data       TEXT    NOT NULL CHECK (json_valid(data)),
    UNIQUE (message_id, position)
) STRICT;

CREATE TABLE runs (
    id                 TEXT    NOT NULL PRIMARY KEY,
    session_id         TEXT    NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    owner_id           TEXT    NOT NULL,
    -- The client's idempotency key: the unique pair makes a retried prompt find the
    -- run it already started instead of starting a second one.
    request_id         TEXT    NOT NULL,
    status             TEXT    NOT NULL
        CHECK (status IN ('running', 'interrupted', 'completed', 'failed', 'cancelled')),
    user_message_index INTEGER NOT NULL CHECK (user_message_index >= 0),
    created_at         INTEGER NOT NULL,
    updated_at         INTEGER NOT NULL,
    first_token_at     INTEGER,
    ended_at           INTEGER,
    usage_input        INTEGER NOT NULL CHECK (usage_input >= 0),
    usage_output       INTEGER NOT NULL CHECK (usage_output >= 0),
    error_code         TEXT,
    error_message      TEXT,
    -- An error is a code and a message, or nothing.
    CHECK ((error_code IS NULL) = (error_message IS NULL)),
    UNIQUE (session_id, request_id)
) STRICT;

-- Start-up recovery looks for runs still marked running.
CREATE INDEX runs_by_status ON runs (status);
