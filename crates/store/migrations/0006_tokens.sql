-- Bearer tokens. Only the SHA-256 of each secret is kept: the secret is shown once,
-- when the token is created, and a stolen database cannot be replayed as credentials.

CREATE TABLE tokens (
    id         TEXT    NOT NULL PRIMARY KEY,
    user_id    TEXT    NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    hash       TEXT    NOT NULL UNIQUE CHECK (length(hash) = 64),
    created_at INTEGER NOT NULL,
    revoked_at INTEGER
) STRICT;

CREATE INDEX tokens_by_user ON tokens (user_id);
