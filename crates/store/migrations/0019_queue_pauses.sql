-- Queues that Stop paused (issue 36): a session listed here starts none of its queued
-- prompts on its own — not when its run settles, not at start-up, not on the reaper's
-- pass — until the person resumes the queue or sends a prompt. A row goes with its
-- session.
CREATE TABLE queue_pauses (
    session_id TEXT   NOT NULL PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
    paused_at  INTEGER NOT NULL
) STRICT;
