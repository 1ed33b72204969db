-- A session's choices about tool sources (issue 38: MCP servers): one row per server
-- the person turned on or off for this session in the Rules panel, overriding the
-- server's `projects` list. A server without a row follows its config. A row goes
-- with its session.
CREATE TABLE session_tool_sources (
    session_id TEXT    NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    source     TEXT    NOT NULL,
    owner_id   TEXT    NOT NULL,
    enabled    INTEGER NOT NULL CHECK (enabled IN (0, 1)),
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (session_id, source)
) STRICT;
