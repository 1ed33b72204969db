-- The durable frame log of each run (issue 39): the session-stream frames from a run's
-- `run.accepted` through its last event, in chunks of deflated JSON lines, so a run
-- replays exactly after it left the in-memory ring and across restarts. Only Spool
-- reads `data`. The last chunk of a fully logged run has `complete = 1`; a run with no
-- complete chunk (a crash, an overflow) is shown from a snapshot instead.
CREATE TABLE run_frames (
    run_id     TEXT    NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    chunk      INTEGER NOT NULL CHECK (chunk >= 0),
    session_id TEXT    NOT NULL,
    stream_id  TEXT    NOT NULL,
    first_seq  INTEGER NOT NULL CHECK (first_seq >= 0),
    last_seq   INTEGER NOT NULL CHECK (last_seq >= first_seq),
    frames     INTEGER NOT NULL CHECK (frames > 0),
    complete   INTEGER NOT NULL CHECK (complete IN (0, 1)),
    data       BLOB    NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (run_id, chunk)
) STRICT;

-- Retention prunes by age.
CREATE INDEX run_frames_by_age ON run_frames (created_at);
