-- An idempotency key keeps one opaque answer (the engine's typed outcome as JSON)
-- instead of an HTTP status and body: what goes on the wire is the server's business.
-- Rows written before keep their old body as the answer; the engine still reads those.
-- SQLite cannot drop a CHECK constraint, so the table is rebuilt.
CREATE TABLE idempotency_answers (
    scope      TEXT    NOT NULL,
    key        TEXT    NOT NULL,
    -- NULL while the claim's request is still working.
    answer     TEXT,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (scope, key)
) STRICT;

INSERT INTO idempotency_answers (scope, key, answer, created_at)
    SELECT scope, key, response_body, created_at FROM idempotency;

DROP TABLE idempotency;
ALTER TABLE idempotency_answers RENAME TO idempotency;
