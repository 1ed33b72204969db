-- Session leases: which node runs a session, until when (milliseconds since the
-- epoch). One row per session at most; a node takes a free or expired lease, renews
-- it while its run lives and deletes it when done. A lease goes with its session.

CREATE TABLE session_leases (
    session_id TEXT    NOT NULL PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
    node_id    TEXT    NOT NULL CHECK (length(node_id) > 0),
    expires_at INTEGER NOT NULL
) STRICT;

-- Finding the leases whose nodes stopped renewing.
CREATE INDEX session_leases_by_expiry ON session_leases (expires_at);
