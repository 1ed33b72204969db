-- The epoch of a session lease (issue 43): drawn afresh each time the lease changes
-- hands or is taken after being given up, kept while its node extends it. Every write
-- a run makes checks, in its transaction, that the lease still has the node and the
-- epoch the run's taking got, so a node that lost the lease (frozen, or cut off from
-- the database, past its end) writes nothing for the run another node took over.
-- A lease taken before this migration has epoch 0 until it changes hands.
ALTER TABLE session_leases ADD COLUMN epoch INTEGER NOT NULL DEFAULT 0;
