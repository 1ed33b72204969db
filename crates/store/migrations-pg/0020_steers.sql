-- Steers (issue 40): a user message sent into a running run. It waits in the queue
-- like a prompt sent with `queue: true`, marked `steer`, until the run takes it at its
-- next safe boundary (after a model call or a tool batch): taking it deletes the row
-- and inserts the user message at the run's next index in one transaction. A steer the
-- run settled without taking stays a queued prompt, and runs in its queue order.
ALTER TABLE queued_messages ADD COLUMN steer BOOLEAN NOT NULL DEFAULT FALSE;
