-- Draft checkpoints are appended instead of rewritten: rewriting the whole message at
-- every checkpoint made a long answer cost the square of its size (one 7.9 MB answer
-- wrote 7.58 GB). `message_drafts.message` now holds the message as it began, and each
-- checkpoint adds a row here with the stream deltas since the previous one (a JSON
-- array); applied in `seq` order they rebuild the draft. A draft from before this
-- migration has its whole message and no chunk, and reads back as it is.
CREATE TABLE message_draft_chunks (
    session_id TEXT    NOT NULL REFERENCES message_drafts (session_id) ON DELETE CASCADE,
    seq        INTEGER NOT NULL CHECK (seq >= 0),
    deltas     TEXT    NOT NULL CHECK (json_valid(deltas)),
    PRIMARY KEY (session_id, seq)
) STRICT;
