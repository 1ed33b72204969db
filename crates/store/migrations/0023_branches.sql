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
    session_id TEXT    NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    ordinal    INTEGER NOT NULL CHECK (ordinal >= 1),
    owner_id   TEXT    NOT NULL,
    fork_index INTEGER NOT NULL CHECK (fork_index >= 0),
    anchor     TEXT,
    kind       TEXT    NOT NULL CHECK (kind IN ('edit', 'regenerate', 'revert', 'switch', 'rollback')),
    -- The session memory of the shelved path when it reached below its summary.
    memory     TEXT    CHECK (memory IS NULL OR json_valid(memory)),
    created_at INTEGER NOT NULL,
    PRIMARY KEY (session_id, ordinal)
) STRICT;

CREATE INDEX branches_by_anchor ON branches (session_id, fork_index, anchor);

CREATE TABLE branch_messages (
    id         TEXT    NOT NULL PRIMARY KEY,
    session_id TEXT    NOT NULL,
    ordinal    INTEGER NOT NULL,
    owner_id   TEXT    NOT NULL,
    idx        INTEGER NOT NULL CHECK (idx >= 0),
    role       TEXT    NOT NULL CHECK (role IN ('user', 'assistant', 'toolResult')),
    meta       TEXT    NOT NULL CHECK (json_valid(meta)),
    -- `[{"id", "position", "kind", "data"}]`, as the rows of `parts` were.
    parts      TEXT    NOT NULL CHECK (json_valid(parts)),
    created_at INTEGER NOT NULL,
    UNIQUE (session_id, ordinal, idx),
    FOREIGN KEY (session_id, ordinal) REFERENCES branches (session_id, ordinal) ON DELETE CASCADE
) STRICT;
