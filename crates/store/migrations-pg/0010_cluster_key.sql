-- The key nodes of one deployment seal what they write to Redis with (an HMAC key; see
-- spool_bus's seal.rs), for deployments that configure none: the first node to start
-- stores a random one, and every node of the database reads the same row. One row.
CREATE TABLE cluster_key (
    id SMALLINT PRIMARY KEY CHECK (id = 1),
    secret BYTEA NOT NULL,
    created_at BIGINT NOT NULL
);
