-- Step snapshots (issue 39): the trees a run recorded in the project's shadow
-- repository (in the data directory, on `node_id`) before the first and after the last
-- call of a turn whose calls may change files, so a revert can put the files back.
-- One row per turn of a run; `after_tree` stays NULL when the run parked for good,
-- was stopped or crashed inside the step. `*_skipped` name what a snapshot left out
-- (`{"paths": [...], "count": n}`): a revert cannot restore those.
CREATE TABLE step_snapshots (
    run_id         TEXT    NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    turn           INTEGER NOT NULL CHECK (turn >= 0),
    session_id     TEXT    NOT NULL,
    owner_id       TEXT    NOT NULL,
    project_id     TEXT    NOT NULL,
    -- The conversation branch; 0 until sessions have branches.
    branch         INTEGER NOT NULL DEFAULT 0,
    -- The assistant message whose calls the step ran.
    message_index  INTEGER NOT NULL CHECK (message_index >= 0),
    before_tree    TEXT    NOT NULL,
    after_tree     TEXT,
    before_skipped TEXT    NOT NULL CHECK (json_valid(before_skipped)),
    after_skipped  TEXT    CHECK (after_skipped IS NULL OR json_valid(after_skipped)),
    node_id        TEXT    NOT NULL,
    created_at     INTEGER NOT NULL,
    PRIMARY KEY (run_id, turn)
) STRICT;

-- A session's steps in order (revert), and retention by age.
CREATE INDEX step_snapshots_by_session ON step_snapshots (session_id, message_index);
CREATE INDEX step_snapshots_by_age ON step_snapshots (created_at);
