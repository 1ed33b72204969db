-- What a session remembers beyond its messages: confirmed facts and the summary that
-- compaction wrote. One JSON document per session, replaced whole.

CREATE TABLE session_memory (
    session_id TEXT    NOT NULL PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
    owner_id   TEXT    NOT NULL,
    memory     TEXT    NOT NULL CHECK (json_valid(memory)),
    updated_at INTEGER NOT NULL
) STRICT;
