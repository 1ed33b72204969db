-- The assistant message a run is streaming, checkpointed while it streams (at most every
-- 250 ms or 8 KiB, never per token), so a crash or a stop keeps the text a person
-- already watched. One row per session (a session has one active run). Committing the
-- message deletes the row; a row whose run has settled without committing it (a crash,
-- a stop) becomes a committed message marked with the failure at the next start.
CREATE TABLE message_drafts (
    session_id TEXT    NOT NULL PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
    run_id     TEXT    NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    owner_id   TEXT    NOT NULL,
    message_id TEXT    NOT NULL,
    idx        INTEGER NOT NULL CHECK (idx >= 0),
    -- The whole Message as JSON (the draft is rewritten, never appended to).
    message    TEXT    NOT NULL CHECK (json_valid(message)),
    updated_at INTEGER NOT NULL
) STRICT;

-- The cascade from runs.
CREATE INDEX message_drafts_by_run ON message_drafts (run_id);
