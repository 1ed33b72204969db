-- The agent's todo list of a session (the `todo_write` tool): one JSON array per
-- session, replaced whole at every write, so a list someone was shown survives a
-- restart and is in the state every reconnecting client gets.

CREATE TABLE session_todos (
    session_id TEXT COLLATE "C" NOT NULL PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
    owner_id   TEXT COLLATE "C" NOT NULL,
    todos      JSONB  NOT NULL CHECK (jsonb_typeof(todos) = 'array'),
    updated_at BIGINT NOT NULL
);
