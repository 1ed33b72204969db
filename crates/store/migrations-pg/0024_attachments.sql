-- Attachments (issue 42): files a user uploads or sends inline with a prompt. The bytes
-- are a blob in the data directory named by their SHA-256 (so the same bytes are kept
-- once); a row is one user's use of them. An upload is unbound (`session_id` NULL) until
-- a prompt uses it; deleting the session deletes its rows, and the engine then removes
-- the blobs no row names any more.
CREATE TABLE attachments (
    id         TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    owner_id   TEXT COLLATE "C" NOT NULL,
    session_id TEXT COLLATE "C" REFERENCES sessions (id) ON DELETE CASCADE,
    sha256     TEXT COLLATE "C" NOT NULL CHECK (length(sha256) = 64),
    size       BIGINT NOT NULL CHECK (size >= 0),
    media_type TEXT   NOT NULL,
    name       TEXT   NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX attachments_by_owner ON attachments (owner_id);
CREATE INDEX attachments_by_sha256 ON attachments (sha256);
CREATE INDEX attachments_by_session ON attachments (session_id);

-- A user message's file is a part of kind `file`.
ALTER TABLE parts DROP CONSTRAINT parts_kind_check;
ALTER TABLE parts ADD CONSTRAINT parts_kind_check CHECK (kind IN ('text', 'thinking', 'toolCall', 'file'));
