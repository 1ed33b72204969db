-- The durable frame log of each run (issue 39): the session-stream frames from a run's
-- `run.accepted` through its last event, in chunks of deflated JSON lines, so a run
-- replays exactly after it left the in-memory ring and across restarts. Only Spool
-- reads `data`. The last chunk of a fully logged run has `complete`; a run with no
-- complete chunk (a crash, an overflow) is shown from a snapshot instead.
CREATE TABLE run_frames (
    run_id     TEXT COLLATE "C" NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    chunk      BIGINT  NOT NULL CHECK (chunk >= 0),
    session_id TEXT COLLATE "C" NOT NULL,
    stream_id  TEXT    NOT NULL,
    first_seq  BIGINT  NOT NULL CHECK (first_seq >= 0),
    last_seq   BIGINT  NOT NULL CHECK (last_seq >= first_seq),
    frames     BIGINT  NOT NULL CHECK (frames > 0),
    complete   BOOLEAN NOT NULL,
    data       BYTEA   NOT NULL,
    created_at BIGINT  NOT NULL,
    PRIMARY KEY (run_id, chunk)
);

-- Retention prunes by age.
CREATE INDEX run_frames_by_age ON run_frames (created_at);
