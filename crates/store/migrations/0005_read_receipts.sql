-- Durable read receipts: the highest message index a person has read in a session.
ALTER TABLE sessions ADD COLUMN read_index INTEGER CHECK (read_index IS NULL OR read_index >= 0);
