-- Per-session model choice and the full usage record of a run.
--
-- `sessions.model` names the configured model a session uses (NULL: the server's
-- default). `runs.usage` keeps every usage field as JSON (reasoning and cache tokens,
-- cost); `usage_input` and `usage_output` stay as plain columns for queries.

ALTER TABLE sessions ADD COLUMN model TEXT;

ALTER TABLE runs ADD COLUMN usage TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(usage));
