-- The bus PostgreSQL backend schema (version 1). Applied by Migrate, by
-- New and OpenURL unless told not to, or by `bus postgres migrate`; every
-- statement is idempotent, and a transaction advisory lock keeps two
-- migrations from running at once.
SELECT pg_advisory_xact_lock(1651864324, 0);

-- bus_topics names every topic a message was published to or a group
-- was created on, with its partition count (0: none recorded).
CREATE TABLE IF NOT EXISTS bus_topics (
    name       text PRIMARY KEY,
    partitions integer NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- bus_messages is the log of every topic: seq is the order of writing
-- (one sequence for every topic, so it alone names a message: a fetch
-- reads its messages by the primary key alone), visible_at when the message is due
-- (its DeliverAt, or when it was written). key and headers are bytea
-- because valid UTF-8 may hold NUL, which text refuses.
CREATE TABLE IF NOT EXISTS bus_messages (
    topic        text NOT NULL,
    seq          bigint GENERATED ALWAYS AS IDENTITY,
    id           text NOT NULL,
    key          bytea NOT NULL,
    headers      bytea,
    payload      bytea NOT NULL,
    published_at timestamptz NOT NULL,
    visible_at   timestamptz NOT NULL,
    PRIMARY KEY (seq)
);
CREATE INDEX IF NOT EXISTS bus_messages_topic ON bus_messages (topic, seq);

-- bus_groups holds the consumer groups; id names the group in
-- bus_deliveries.
CREATE TABLE IF NOT EXISTS bus_groups (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    topic      text NOT NULL,
    name       text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    UNIQUE (topic, name)
);

-- bus_deliveries holds one row per message a group has not settled.
-- visible_at is when a member may fetch it: when it is due, when its
-- lease ends (leased), or when a nack's delay ends. n counts the
-- deliveries and names the current one (an AckID carries it); attempt is
-- n less the deliveries given back uncounted (Release, Snooze). lease_by
-- names the fetch that leased the row, so that a subscription can take
-- back what a fetch whose reply it lost handed out.
CREATE TABLE IF NOT EXISTS bus_deliveries (
    group_id   bigint NOT NULL,
    seq        bigint NOT NULL,
    visible_at timestamptz NOT NULL,
    n          integer NOT NULL DEFAULT 0,
    attempt    integer NOT NULL DEFAULT 0,
    leased     boolean NOT NULL DEFAULT false,
    lease_by   bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (group_id, seq)
);
-- First deliveries are fetched in due order, redeliveries (n > 0) first.
CREATE INDEX IF NOT EXISTS bus_deliveries_fresh ON bus_deliveries (group_id, visible_at, seq) WHERE n = 0;
CREATE INDEX IF NOT EXISTS bus_deliveries_again ON bus_deliveries (group_id, visible_at) WHERE n > 0;
-- Rows are deleted soon after they are written: vacuum after a fixed
-- number of dead rows rather than a fraction of the table.
ALTER TABLE bus_deliveries SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 5000,
    autovacuum_vacuum_cost_delay = 0, autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 5000);
ALTER TABLE bus_messages SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 5000,
    autovacuum_vacuum_cost_delay = 0, autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 5000);

-- bus_dedup records the caller-set IDs published to a topic within the
-- dedup window (dkey is the ID, with the replay time of a replayed dead
-- letter appended).
CREATE TABLE IF NOT EXISTS bus_dedup (
    topic text NOT NULL,
    dkey  text NOT NULL,
    at    timestamptz NOT NULL,
    PRIMARY KEY (topic, dkey)
);
CREATE INDEX IF NOT EXISTS bus_dedup_at ON bus_dedup (at);

-- bus_locks holds the group locks (backend.GroupLocker), bus_members the
-- live members of partitioned groups (backend.Partitioner).
CREATE TABLE IF NOT EXISTS bus_locks (
    topic  text NOT NULL,
    grp    text NOT NULL,
    holder text NOT NULL,
    until  timestamptz NOT NULL,
    PRIMARY KEY (topic, grp)
);
CREATE TABLE IF NOT EXISTS bus_members (
    topic  text NOT NULL,
    grp    text NOT NULL,
    member text NOT NULL,
    until  timestamptz NOT NULL,
    PRIMARY KEY (topic, grp, member)
);

-- The mark Migrate looks for first: the schema is in place (the file is
-- applied atomically), so a process that starts does not take the
-- tables' locks again while others write.
COMMENT ON TABLE bus_topics IS 'bus postgres schema v1';
