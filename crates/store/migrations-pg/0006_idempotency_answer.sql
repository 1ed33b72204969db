-- An idempotency key keeps one opaque answer (the engine's typed outcome as JSON)
-- instead of an HTTP status and body: what goes on the wire is the server's business.
-- Rows written before keep their old body as the answer; the engine still reads those.
-- Dropping the status column drops the CHECKs that name it.
ALTER TABLE idempotency DROP COLUMN response_status;
ALTER TABLE idempotency RENAME COLUMN response_body TO answer;
