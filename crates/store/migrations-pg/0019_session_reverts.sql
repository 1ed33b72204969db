-- A session's pending revert (issue 39): the turns from `message_index` on were shelved
-- as branch `ordinal` and the files put back as they were before them. `state` holds
-- what unrevert needs (the tree of the files before the revert, what was restored,
-- the conflicts left alone, what was not covered). A prompt after the revert makes it
-- final: the row is stale once the session holds a message at `message_index` again.
CREATE TABLE session_reverts (
    session_id    TEXT COLLATE "C" NOT NULL PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
    owner_id      TEXT COLLATE "C" NOT NULL,
    message_index BIGINT NOT NULL CHECK (message_index >= 0),
    ordinal       BIGINT,
    state         JSONB  NOT NULL,
    created_at    BIGINT NOT NULL
);
