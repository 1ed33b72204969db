-- Prompts sent with `queue: true` while the session had a run going (issue 16): they
-- wait here, in `seq` order, until a run takes them. Taking one deletes its row in the
-- transaction that inserts its run (same request id), so a prompt runs once and is
-- never lost to a crash between the two. A row goes with its session.
CREATE TABLE queued_messages (
    -- Queue order: increasing across the whole table, so two prompts queued in the
    -- same millisecond keep the order they were accepted in.
    seq             BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- The message id it keeps once a run takes it (msg_…).
    id              TEXT COLLATE "C" NOT NULL UNIQUE,
    session_id      TEXT COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    owner_id        TEXT COLLATE "C" NOT NULL,
    request_id      TEXT   NOT NULL,
    text            TEXT   NOT NULL,
    approval_policy TEXT   CHECK (approval_policy IN ('wait', 'deny')),
    on_disconnect   TEXT   NOT NULL CHECK (on_disconnect IN ('continue', 'cancel')),
    created_at      BIGINT NOT NULL,
    -- A retried prompt finds the message it queued instead of queueing a second one.
    UNIQUE (session_id, request_id)
);

CREATE INDEX queued_messages_by_session ON queued_messages (session_id, seq);
