-- The bus PostgreSQL backend schema (version 3: version 2 and bus_leases). Applied by Migrate, by
-- New and OpenURL unless told not to, or by `bus postgres migrate`; every
-- statement is idempotent, and a transaction advisory lock keeps two
-- migrations from running at once.
SELECT pg_advisory_xact_lock(1651864324, 0);

-- bus_topics names every topic a message was published to or a group
-- was created on, with its partition count (0: none recorded). floor is
-- the least ord a message written to the topic gets: a group that starts
-- at the newest message (or is sought) raises it to the first
-- transaction id not yet assigned, and starts its cursor there.
CREATE TABLE IF NOT EXISTS bus_topics (
    name       text PRIMARY KEY,
    partitions integer NOT NULL DEFAULT 0,
    floor      xid8 NOT NULL DEFAULT '0',
    created_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- bus_messages is the log of every topic: seq is the order of writing
-- (one sequence for every topic, so it alone names a message), visible_at
-- when the message is due (its DeliverAt, or when it was written). ord is the id
-- of the writing transaction (pg_current_xact_id()), raised to the
-- topic's floor and, for PublishTx, to the last ord of the message's
-- key: a group reads the log in (ord, seq) order, and only the rows whose
-- ord is below the xmin of its snapshot, so nothing can commit behind
-- its cursor. key and headers are bytea because valid UTF-8 may hold
-- NUL, which text refuses.
CREATE TABLE IF NOT EXISTS bus_messages (
    topic        text NOT NULL,
    seq          bigint GENERATED ALWAYS AS IDENTITY,
    ord          xid8 NOT NULL,
    id           text NOT NULL,
    key          bytea NOT NULL,
    headers      bytea,
    payload      bytea NOT NULL,
    published_at timestamptz NOT NULL,
    visible_at   timestamptz NOT NULL,
    PRIMARY KEY (topic, ord, seq)
);

-- bus_groups holds the consumer groups; id names the group in
-- bus_deliveries. (cur_ord, cur_seq) is the group's cursor: the last
-- message of the log it has passed. A fetch locks the row, takes the
-- messages after it and moves it; every message at or before it either
-- has a delivery row of the group, is pending in a lease of the group
-- (bus_leases) or is settled.
CREATE TABLE IF NOT EXISTS bus_groups (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    topic      text NOT NULL,
    name       text NOT NULL,
    cur_ord    xid8 NOT NULL DEFAULT '0',
    cur_seq    bigint NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    UNIQUE (topic, name)
) WITH (fillfactor = 50);

-- bus_deliveries holds one row per message a group has passed with its
-- cursor and not settled, but for the first deliveries pending in a
-- lease of bus_leases: leased, given back, or held until its DeliverAt
-- (a first delivery waiting: n = 0). visible_at is when a
-- member may fetch it: when it is due, when its lease ends (leased), or
-- when a nack's delay ends. ord is the message's, so that the row finds
-- its message by the log's key. n counts the deliveries and names the
-- current one (an AckID carries it); attempt is n less the deliveries
-- given back uncounted (Release, Snooze). lease_by
-- names the fetch that leased the row, so that a subscription can take
-- back what a fetch whose reply it lost handed out.
CREATE TABLE IF NOT EXISTS bus_deliveries (
    group_id   bigint NOT NULL,
    seq        bigint NOT NULL,
    ord        xid8 NOT NULL,
    visible_at timestamptz NOT NULL,
    n          integer NOT NULL DEFAULT 0,
    attempt    integer NOT NULL DEFAULT 0,
    leased     boolean NOT NULL DEFAULT false,
    lease_by   bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (group_id, seq)
);
-- bus_leases holds one row per fetch that leased first deliveries: the
-- messages a fetch takes after the group's cursor, due, are leased
-- together (n = 1, attempt 1) until visible_at, under the fetch's tag
-- lease_by. fetched lists their seqs in delivery order and ords their
-- messages' ords (one each, in the same order); pending lists the seqs
-- not yet settled. An ack removes its seqs from pending (and deletes the
-- row when nothing is left); a Nack, Release, Snooze, Extend or
-- DeadLetter of one of them moves it out into a bus_deliveries row; a
-- fetch turns each lease that ran out into bus_deliveries rows (leased,
-- n = 1, their lease over), which come back as redeliveries. A message
-- is pending in at most one of bus_leases and bus_deliveries per group.
CREATE TABLE IF NOT EXISTS bus_leases (
    group_id   bigint NOT NULL,
    lease_by   bigint NOT NULL,
    visible_at timestamptz NOT NULL,
    fetched    bigint[] NOT NULL,
    ords       xid8[] NOT NULL,
    pending    bigint[] NOT NULL,
    PRIMARY KEY (group_id, lease_by)
) WITH (fillfactor = 50);
CREATE INDEX IF NOT EXISTS bus_leases_due ON bus_leases (group_id, visible_at);
-- Keep a lease's arrays in its row (compressed) rather than out of line,
-- where every ack would write them again.
ALTER TABLE bus_leases ALTER COLUMN fetched SET STORAGE MAIN, ALTER COLUMN ords SET STORAGE MAIN,
    ALTER COLUMN pending SET STORAGE MAIN;
ALTER TABLE bus_leases SET (toast_tuple_target = 8160, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0, autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 1000);
-- Waiting first deliveries are fetched in due order, redeliveries (n > 0) first.
CREATE INDEX IF NOT EXISTS bus_deliveries_fresh ON bus_deliveries (group_id, visible_at, seq) WHERE n = 0;
CREATE INDEX IF NOT EXISTS bus_deliveries_again ON bus_deliveries (group_id, visible_at) WHERE n > 0;
-- Rows are deleted soon after they are written: vacuum after a fixed
-- number of dead rows rather than a fraction of the table.
ALTER TABLE bus_deliveries SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 5000,
    autovacuum_vacuum_cost_delay = 0, autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 5000);
ALTER TABLE bus_messages SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 5000,
    autovacuum_vacuum_cost_delay = 0, autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 5000);

-- A process of schema v2 does not know bus_leases: its trim would delete
-- messages still pending in a lease. A delete from bus_messages
-- therefore fails unless its transaction set bus.schema to 3, as every
-- delete of this schema does (set_config('bus.schema', '3', true)): an
-- older process left running gets an error from its trim, not a loss.
CREATE OR REPLACE FUNCTION bus_messages_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('bus.schema', true) IS DISTINCT FROM '3' THEN
        RAISE EXCEPTION 'bus: a delete from bus_messages needs bus.schema = 3: is a process of an older bus release running?'
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    RETURN NULL;
END $$;
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'bus_messages_guard' AND tgrelid = 'bus_messages'::regclass) THEN
        CREATE TRIGGER bus_messages_guard BEFORE DELETE ON bus_messages FOR EACH STATEMENT EXECUTE FUNCTION bus_messages_guard();
    END IF;
END $$;

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

-- bus_keyord holds, per topic and key hash, the ord PublishTx gave the
-- key's last messages: the next transaction publishing the key (it waits
-- for the key's lock) gives its messages at least that ord, so a group
-- reads a key's messages in the order their transactions committed.
-- Rows below every running transaction's id are deleted by the trimmer.
CREATE TABLE IF NOT EXISTS bus_keyord (
    topic text NOT NULL,
    k     integer NOT NULL,
    ord   xid8 NOT NULL,
    PRIMARY KEY (topic, k)
);

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

-- bus_results holds the handlers' results (backend.ResultStore) until
-- their ttl runs out; each store deletes a few expired rows.
CREATE TABLE IF NOT EXISTS bus_results (
    topic text NOT NULL,
    id    text NOT NULL,
    val   bytea NOT NULL,
    until timestamptz NOT NULL,
    PRIMARY KEY (topic, id)
);
CREATE INDEX IF NOT EXISTS bus_results_until ON bus_results (until);

-- The mark Migrate looks for first: the schema is in place (the file is
-- applied atomically), so a process that starts does not take the
-- tables' locks again while others write.
COMMENT ON TABLE bus_topics IS 'bus postgres schema v4';
