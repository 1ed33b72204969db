-- Web Push (issue 41): what reaches a person's browser while no page of theirs is open.
--
-- server_keys holds the secrets every node of a deployment must share, by name: `vapid`
-- (the P-256 key pair that signs pushes, PKCS#8; browsers subscribe with its public
-- half, so all nodes sign with one) and `decision` (the HMAC key of decision tokens).
-- The first node to need one inserts a random one (ON CONFLICT DO NOTHING) and every
-- node reads the row that stayed; rotating a key is deleting its row.
CREATE TABLE server_keys (
    name       TEXT    NOT NULL PRIMARY KEY,
    secret     BLOB    NOT NULL,
    created_at INTEGER NOT NULL
) STRICT;

-- One row per browser that turned notifications on: its push service's endpoint (the
-- URL the browser chose; UNIQUE, so subscribing again updates the row) and the keys that
-- encrypt for it (RFC 8291: `p256dh`, the browser's public key, and `auth`, both
-- base64url as the browser sends them). `login_id` is the credential that subscribed
-- (a login session or token id), so ending it can remove its rows. `failures` counts
-- tries since the last success (`last_ok_at`).
CREATE TABLE push_subscriptions (
    id         TEXT    NOT NULL PRIMARY KEY,
    owner_id   TEXT    NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    login_id   TEXT,
    endpoint   TEXT    NOT NULL UNIQUE,
    p256dh     TEXT    NOT NULL,
    auth       TEXT    NOT NULL,
    user_agent TEXT,
    created_at INTEGER NOT NULL,
    last_ok_at INTEGER,
    failures   INTEGER NOT NULL DEFAULT 0
) STRICT;

CREATE INDEX push_subscriptions_by_owner ON push_subscriptions (owner_id);
