-- The durable "tool call started" mark of a decided call (issue 14): written just
-- before an approved tool runs. After a crash, a decided call without it never started
-- and runs from its checkpoint; one with it but without a result is never re-run (its
-- run fails with tool_outcome_unknown).
ALTER TABLE approvals ADD COLUMN started_at INTEGER;
