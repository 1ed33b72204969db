-- Auth that cannot quietly switch off, and browser logins that can be ended (SQLite
-- migration 0008).
--
-- auth_settings holds one row: whether auth is on. It is set when the first token is
-- created and cleared only by `spool auth disable`, so revoking the last token leaves
-- auth on. A database that already had a token (even a revoked one) starts with it on.
CREATE TABLE auth_settings (
    id         INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
    enabled    BOOLEAN NOT NULL,
    updated_at BIGINT  NOT NULL
);

INSERT INTO auth_settings (id, enabled, updated_at)
SELECT 1, EXISTS (SELECT 1 FROM tokens), 0;

-- Browser login sessions: the cookie carries a random secret, this table its SHA-256.
CREATE TABLE login_sessions (
    id         TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    token_id   TEXT COLLATE "C" NOT NULL REFERENCES tokens (id) ON DELETE CASCADE,
    user_id    TEXT COLLATE "C" NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    hash       TEXT   NOT NULL UNIQUE CHECK (length(hash) = 64),
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    ended_at   BIGINT
);

CREATE INDEX login_sessions_by_token ON login_sessions (token_id);
CREATE INDEX login_sessions_by_user ON login_sessions (user_id);
-- Every node polls for credentials that stopped working since its last look.
CREATE INDEX login_sessions_by_end ON login_sessions (ended_at);
CREATE INDEX login_sessions_by_expiry ON login_sessions (expires_at);
CREATE INDEX tokens_by_revocation ON tokens (revoked_at);

-- The address each node serves on, refreshed while it runs (see `spool auth disable`).
CREATE TABLE listeners (
    node_id    TEXT    NOT NULL PRIMARY KEY,
    addr       TEXT    NOT NULL,
    public     BOOLEAN NOT NULL,
    updated_at BIGINT  NOT NULL
);
