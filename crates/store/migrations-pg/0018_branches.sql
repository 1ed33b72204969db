-- Branches (issue 39): an edited or regenerated turn, a switch to another version of a
-- turn, or a revert shelves the turns from `fork_index` on; the active path stays in
-- `messages`, so every reader of a session's conversation sees the path and nothing
-- else. A shelved branch holds its messages whole (each with its parts as JSON, ids
-- kept), and comes back into `messages` when someone switches to it.
--
-- `anchor` is the id of the message just before `fork_index` on the path the branch
-- left (NULL at index 0): the branches that are versions of one turn share it, and a
-- branch shelved inside another stays findable once that one is back.
CREATE TABLE branches (
    session_id TEXT COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    ordinal    BIGINT NOT NULL CHECK (ordinal >= 1),
    owner_id   TEXT COLLATE "C" NOT NULL,
    fork_index BIGINT NOT NULL CHECK (fork_index >= 0),
    anchor     TEXT COLLATE "C",
    kind       TEXT   NOT NULL CHECK (kind IN ('edit', 'regenerate', 'revert', 'switch', 'rollback')),
    -- The session memory of the shelved path when it reached below its summary.
    memory     JSONB,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (session_id, ordinal)
);

CREATE INDEX branches_by_anchor ON branches (session_id, fork_index, anchor);

CREATE TABLE branch_messages (
    id         TEXT COLLATE "C" NOT NULL PRIMARY KEY,
    session_id TEXT COLLATE "C" NOT NULL,
    ordinal    BIGINT NOT NULL,
    owner_id   TEXT COLLATE "C" NOT NULL,
    idx        BIGINT NOT NULL CHECK (idx >= 0),
    role       TEXT   NOT NULL CHECK (role IN ('user', 'assistant', 'toolResult')),
    meta       JSONB  NOT NULL,
    -- `[{"id", "position", "kind", "data"}]`, as the rows of `parts` were.
    parts      JSONB  NOT NULL,
    created_at BIGINT NOT NULL,
    UNIQUE (session_id, ordinal, idx),
    FOREIGN KEY (session_id, ordinal) REFERENCES branches (session_id, ordinal) ON DELETE CASCADE
);
