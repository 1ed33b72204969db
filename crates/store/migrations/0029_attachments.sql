-- Attachments (issue 42): files a user uploads or sends inline with a prompt. The bytes
-- are a blob in the data directory named by their SHA-256 (so the same bytes are kept
-- once); a row is one user's use of them. An upload is unbound (`session_id` NULL) until
-- a prompt uses it; deleting the session deletes its rows, and the engine then removes
-- the blobs no row names any more.
CREATE TABLE attachments (
    id         TEXT    NOT NULL PRIMARY KEY,
    owner_id   TEXT    NOT NULL,
    session_id TEXT    REFERENCES sessions (id) ON DELETE CASCADE,
    sha256     TEXT    NOT NULL CHECK (length(sha256) = 64),
    size       INTEGER NOT NULL CHECK (size >= 0),
    media_type TEXT    NOT NULL,
    name       TEXT    NOT NULL,
    created_at INTEGER NOT NULL
) STRICT;
CREATE INDEX attachments_by_owner ON attachments (owner_id);
CREATE INDEX attachments_by_sha256 ON attachments (sha256);
CREATE INDEX attachments_by_session ON attachments (session_id);

-- A user message's file is a part of kind `file`: SQLite cannot change a CHECK in place,
-- so `parts` is rebuilt with the same rows (nothing references it).
CREATE TABLE parts_new (
    id         TEXT    NOT NULL PRIMARY KEY,
    message_id TEXT    NOT NULL REFERENCES messages (id) ON DELETE CASCADE,
    session_id TEXT    NOT NULL,
    owner_id   TEXT    NOT NULL,
    position   INTEGER NOT NULL CHECK (position >= 0),
    kind       TEXT    NOT NULL CHECK (kind IN ('text', 'thinking', 'toolCall', 'file')),
    data       TEXT    NOT NULL CHECK (json_valid(data)),
    UNIQUE (message_id, position)
) STRICT;
INSERT INTO parts_new (id, message_id, session_id, owner_id, position, kind, data)
    SELECT id, message_id, session_id, owner_id, position, kind, data FROM parts;
DROP TABLE parts;
ALTER TABLE parts_new RENAME TO parts;
