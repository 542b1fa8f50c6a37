-- The bus inbox schema (version 1). Applied by inbox.Migrate; every
-- statement is idempotent, and a transaction advisory lock keeps two
-- migrations from running at once.
SELECT pg_advisory_xact_lock(1651864324, 1);

-- bus_inbox holds one row per message a group handled through an inbox:
-- the row is inserted in the handler's transaction, so it commits (or
-- rolls back) with the handler's effects. A redelivery that finds its row
-- is acked without running the handler. Rows are removed by inbox.Prune
-- once they are older than the retention.
CREATE TABLE IF NOT EXISTS bus_inbox (
    topic        text NOT NULL,
    group_name   text NOT NULL,
    id           text NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (topic, group_name, id)
);
COMMENT ON TABLE bus_inbox IS 'bus inbox v1: messages whose handler committed, per topic and group';
-- Prune reads the oldest rows by this index, a batch at a time.
CREATE INDEX IF NOT EXISTS bus_inbox_processed_at ON bus_inbox (processed_at);
