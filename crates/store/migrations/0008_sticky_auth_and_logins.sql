-- Auth that cannot quietly switch off, and browser logins that can be ended.
--
-- auth_settings holds one row: whether auth is on. It is set when the first token is
-- created and cleared only by `spool auth disable`, so revoking the last token leaves
-- auth on. A store that already had a token (even a revoked one) starts with it on.
CREATE TABLE auth_settings (
    id         INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
    enabled    INTEGER NOT NULL CHECK (enabled IN (0, 1)),
    updated_at INTEGER NOT NULL
) STRICT;

INSERT INTO auth_settings (id, enabled, updated_at)
SELECT 1, EXISTS (SELECT 1 FROM tokens), 0;

-- Browser login sessions: the cookie carries a random secret, this table its SHA-256.
-- Ended by logout (ended_at), by expiry (expires_at) and by revoking the token.
CREATE TABLE login_sessions (
    id         TEXT    NOT NULL PRIMARY KEY,
    token_id   TEXT    NOT NULL REFERENCES tokens (id) ON DELETE CASCADE,
    user_id    TEXT    NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    hash       TEXT    NOT NULL UNIQUE CHECK (length(hash) = 64),
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    ended_at   INTEGER
) STRICT;

CREATE INDEX login_sessions_by_token ON login_sessions (token_id);
CREATE INDEX login_sessions_by_user ON login_sessions (user_id);
-- Running servers poll for credentials that stopped working since their last look.
CREATE INDEX login_sessions_by_end ON login_sessions (ended_at);
CREATE INDEX login_sessions_by_expiry ON login_sessions (expires_at);
CREATE INDEX tokens_by_revocation ON tokens (revoked_at);

-- The address each node serves on, refreshed every few seconds while it runs:
-- `spool auth disable` refuses while a fresh row says a server is reachable from
-- the network.
CREATE TABLE listeners (
    node_id    TEXT    NOT NULL PRIMARY KEY,
    addr       TEXT    NOT NULL,
    public     INTEGER NOT NULL CHECK (public IN (0, 1)),
    updated_at INTEGER NOT NULL
) STRICT;
