-- The bus outbox schema (version 1). Applied by outbox.Migrate or
-- `bus outbox migrate`; every statement is idempotent, and a transaction
-- advisory lock keeps two migrations from running at once.
SELECT pg_advisory_xact_lock(1651864323, 1);

-- bus_outbox holds the messages written by outbox.Publish until a relay
-- has published them. seq is the order of writing (per key, the order of
-- commit: Publish holds a lock on the key's hash until the commit); part
-- is the relay partition (hash of the key, or of the ID when there is no
-- key, modulo 16); key and headers are bytea because valid UTF-8 may hold
-- NUL, which text refuses; headers is a JSON object, NULL when empty.
CREATE TABLE IF NOT EXISTS bus_outbox (
    seq        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    part       smallint NOT NULL,
    topic      text NOT NULL,
    id         text NOT NULL,
    key        bytea NOT NULL,
    headers    bytea,
    payload    bytea NOT NULL,
    deliver_at timestamptz,
    expires_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
COMMENT ON TABLE bus_outbox IS 'bus outbox v1: messages waiting for the relay';
-- Every row is deleted soon after it is written: vacuum after a fixed
-- number of dead rows rather than a fraction of the table, without
-- throttling, so that the relay's index scan from the oldest row does not
-- wade through the dead versions of what it already published.
ALTER TABLE bus_outbox SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 5000,
    autovacuum_vacuum_cost_delay = 0, autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 5000);

-- bus_outbox_dead holds rows the relay can never publish (a topic or a
-- message that no longer validates, headers that do not decode), with the
-- reason; they are out of the way of the others.
CREATE TABLE IF NOT EXISTS bus_outbox_dead (
    seq        bigint PRIMARY KEY,
    part       smallint NOT NULL,
    topic      text NOT NULL,
    id         text NOT NULL,
    key        bytea NOT NULL,
    headers    bytea,
    payload    bytea NOT NULL,
    deliver_at timestamptz,
    expires_at timestamptz,
    created_at timestamptz NOT NULL,
    failed_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    reason     text NOT NULL
);
CREATE INDEX IF NOT EXISTS bus_outbox_dead_failed_at ON bus_outbox_dead (failed_at);

-- One notification per inserting statement wakes the relays when the
-- transaction commits (none when it rolls back).
CREATE OR REPLACE FUNCTION bus_outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('bus_outbox', '');
    RETURN NULL;
END
$$;
DROP TRIGGER IF EXISTS bus_outbox_notify ON bus_outbox;
CREATE TRIGGER bus_outbox_notify AFTER INSERT ON bus_outbox
    FOR EACH STATEMENT EXECUTE FUNCTION bus_outbox_notify();
