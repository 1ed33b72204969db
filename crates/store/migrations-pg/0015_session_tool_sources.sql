-- A session's choices about tool sources (issue 38: MCP servers): one row per server
-- the person turned on or off for this session in the Rules panel, overriding the
-- server's `projects` list. A server without a row follows its config. A row goes
-- with its session.
CREATE TABLE session_tool_sources (
    session_id TEXT COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    source     TEXT COLLATE "C" NOT NULL,
    owner_id   TEXT COLLATE "C" NOT NULL,
    enabled    BOOLEAN NOT NULL,
    updated_at BIGINT  NOT NULL,
    PRIMARY KEY (session_id, source)
);
