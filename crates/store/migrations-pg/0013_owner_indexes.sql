-- The per-user caps (issue 35) count one user's sessions that are not archived on every
-- new session, and one user's queued prompts (and their bytes) on every queued prompt:
-- an index each, so a count reads that user's rows instead of the whole table. The
-- session search filters by owner too.
CREATE INDEX sessions_by_owner ON sessions (owner_id, archived);
CREATE INDEX queued_messages_by_owner ON queued_messages (owner_id);
