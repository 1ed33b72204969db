-- The outbox (issue 41): what reaches people and systems outside a session.
--
-- An event is written in the same transaction as the change it tells of (a session
-- created, an approval requested or resolved, a question asked, a run settled), so a
-- change is never told without having happened, nor happens without being told. Its
-- `data` is the event's public JSON: ids, kinds, redacted summaries, never message text
-- or raw arguments. Events outlive their session (a deleted session's events are still
-- owed to their receivers), so no foreign keys tie them to it.
CREATE TABLE events (
    id          TEXT    PRIMARY KEY,
    type        TEXT    NOT NULL CHECK (type IN ('session.created', 'approval.requested', 'approval.resolved',
                                                 'question.asked', 'run.settled')),
    owner_id    TEXT    NOT NULL,
    session_id  TEXT,
    run_id      TEXT,
    approval_id TEXT,
    data        TEXT    NOT NULL CHECK (json_valid(data)),
    created_at  INTEGER NOT NULL,
    -- Set once some node has written the event's deliveries (one per target).
    fanned_out  INTEGER NOT NULL DEFAULT 0 CHECK (fanned_out IN (0, 1))
) STRICT;

-- What fan-out reads: the few events not yet fanned out, oldest first.
CREATE INDEX events_unfanned ON events (created_at, id) WHERE fanned_out = 0;
-- Retention prunes by age.
CREATE INDEX events_by_age ON events (created_at);

-- One event on its way to one target (`webhook:<name>`, `push:<subscription>`): tried
-- until delivered, or dead after the last try of its schedule (an operator may replay
-- it). A node works on a delivery only under a lease (`lease_node` until
-- `lease_until`), so two nodes never send it at once; a node whose lease lapsed records
-- nothing.
CREATE TABLE deliveries (
    id           TEXT    PRIMARY KEY,
    event_id     TEXT    NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    target       TEXT    NOT NULL,
    status       TEXT    NOT NULL CHECK (status IN ('pending', 'delivered', 'dead', 'skipped')),
    attempts     INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_at      INTEGER NOT NULL,
    lease_node   TEXT,
    lease_until  INTEGER,
    last_status  INTEGER,
    last_error   TEXT,
    created_at   INTEGER NOT NULL,
    delivered_at INTEGER,
    UNIQUE (event_id, target)
) STRICT;

-- What the dispatcher claims: pending deliveries that are due.
CREATE INDEX deliveries_due ON deliveries (status, next_at);

-- A configured webhook the receiver disabled (it answered 410 Gone): nothing more is
-- sent to it until an operator enables it again. Endpoints themselves live in config.
CREATE TABLE webhook_endpoints (
    name        TEXT    PRIMARY KEY,
    disabled_at INTEGER,
    reason      TEXT
) STRICT;
