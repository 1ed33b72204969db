-- The agent's todo list of a session (the `todo_write` tool): one JSON array per
-- session, replaced whole at every write, so a list someone was shown survives a
-- restart and is in the state every reconnecting client gets.

CREATE TABLE session_todos (
    session_id TEXT    NOT NULL PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
    owner_id   TEXT    NOT NULL,
    todos      TEXT    NOT NULL CHECK (json_valid(todos) AND json_type(todos) = 'array'),
    updated_at INTEGER NOT NULL
) STRICT;
