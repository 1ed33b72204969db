-- A session's mode: 'agent' (every tool) or 'plan' (only tools that change nothing,
-- and exit_plan to hand the plan to the person).
ALTER TABLE sessions ADD COLUMN mode TEXT NOT NULL DEFAULT 'agent' CHECK (mode IN ('agent', 'plan'));
