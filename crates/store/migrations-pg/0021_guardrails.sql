-- Guardrails (issue 41): the session's own limits on cost, tokens, wall time and tool
-- calls, as JSON (`{"runCostUsd": 2, …}`), which may only tighten the server's
-- `[guardrails]`. NULL: the session has none of its own. Read whole when a run starts,
-- written whole by `PATCH /api/sessions/{id}`.
ALTER TABLE sessions ADD COLUMN guardrails JSONB
    CHECK (guardrails IS NULL OR jsonb_typeof(guardrails) = 'object');
