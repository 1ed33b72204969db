-- An approval may end `superseded` (issue 14, "re-check before acting"): the file its
-- `write` or `edit` call would change was changed before the call ran, so a new
-- approval, with a preview of the change against the file as it is now, asks for the
-- same call instead. `approvals_status_check` is the name PostgreSQL gave the column's
-- CHECK in 0001.
ALTER TABLE approvals DROP CONSTRAINT approvals_status_check;
ALTER TABLE approvals ADD CONSTRAINT approvals_status_check
    CHECK (status IN ('pending', 'resolved', 'expired', 'cancelled', 'superseded'));
