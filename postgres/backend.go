package postgres

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/trimset"
)

// Advisory lock namespaces (the first of the two int4 keys), next to the
// outbox's "bus\x01" .. "bus\x03".
const (
	lockMigrate = 1651864324 // "bus\x04": the migration (schema.sql)
	lockTopic   = 1651864325 // "bus\x05": a topic's hash; shared by writers, exclusive for a new group
	lockKeys    = 1651864326 // "bus\x06": a key's hash, taken by PublishTx until the commit
)

// allowDelete is the call that lets the transaction it runs in delete
// from bus_messages (see bus_messages_guard in schema.sql).
const allowDelete = `set_config('bus.schema', '3', true)`

// closeBound bounds what Close waits for the backend's own I/O.
const closeBound = 2 * time.Second

// Backend is the PostgreSQL backend. It is safe for concurrent use.
type Backend struct {
	pool    *pgxpool.Pool
	ownPool bool
	opts    Options
	lis     *listener
	pub     publisher
	notes   *notifier
	members *members

	life   context.Context // ends at Close
	cancel context.CancelFunc
	shut   atomic.Bool
	mu     sync.Mutex
	trims  map[string]int // subscribed topics, with their subscription count
	// published holds the topics this backend published to or bounded
	// (BoundRetention), which the trimmer trims too.
	published trimset.Set
	wg        sync.WaitGroup // listener, trimmer, notifier, member loop and give-backs of lost fetches
}

var (
	_ backend.Backend = (*Backend)(nil)
	_ backend.Pinger  = (*Backend)(nil)
)

// New returns a backend over pool, which the backend never closes. opts
// may be nil. Unless opts.SkipMigrate is set it runs Migrate first, within
// ctx. The backend opens one connection of its own, outside the pool, to
// LISTEN for notifications.
func New(ctx context.Context, pool *pgxpool.Pool, opts *Options) (*Backend, error) {
	if pool == nil {
		return nil, fmt.Errorf("postgres: new: %w: nil pool", ErrInvalidOption)
	}
	return newBackend(ctx, pool, false, opts)
}

func newBackend(ctx context.Context, pool *pgxpool.Pool, own bool, opts *Options) (*Backend, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("postgres: new: %w", err)
	}
	if !o.SkipMigrate {
		if err := Migrate(ctx, pool); err != nil {
			return nil, err
		}
	}
	life, cancel := context.WithCancel(context.Background())
	b := &Backend{
		pool:    pool,
		ownPool: own,
		opts:    o,
		life:    life,
		cancel:  cancel,
		trims:   map[string]int{},
	}
	b.pub = publisher{channel: o.Channel, dedup: o.DedupWindow}
	b.lis = newListener(pool.Config().ConnConfig.Copy(), o.Channel)
	b.notes = newNotifier()
	b.members = newMembers()
	b.wg.Add(4)
	go func() { defer b.wg.Done(); b.lis.run(life) }()
	go func() { defer b.wg.Done(); b.trimLoop(life) }()
	go func() { defer b.wg.Done(); b.notes.run(life, b) }()
	go func() { defer b.wg.Done(); b.memberLoop(life) }()
	return b, nil
}

// Pool returns the pool the backend works with. The backend keeps owning
// it when it opened it from a URL.
func (b *Backend) Pool() *pgxpool.Pool { return b.pool }

// Capabilities reports what the backend guarantees.
func (b *Backend) Capabilities() backend.Capabilities {
	return backend.Capabilities{
		Name:           "postgres",
		ConsumerGroups: true,
		Persistent:     true,
		Redelivery:     true,
		NackDelay:      true,
		Ordered:        true,
		StartOldest:    true,
		PublishDedup:   true,
		Extend:         true,
		Scheduling:     true,
		Broadcast:      true,
		Results:        true,
		MaxPayload:     b.opts.MaxPayload,
		MaxPayloadLimit: fmt.Sprintf("the postgres backend's max_payload (URL parameter; Options.MaxPayload); raise it there, "+
			"to at most %d", maxMaxPayload),
	}
}

// Close stops the listener and the trimmer and closes the pool when the
// backend opened it. It returns within about two seconds, on a dead
// network too. Subscriptions still open end: their Receive returns an
// error wrapping backend.ErrClosed.
func (b *Backend) Close() error {
	b.mu.Lock() // no giveBackLost starts after this
	closed := b.shut.Swap(true)
	b.mu.Unlock()
	if closed {
		return fmt.Errorf("postgres: close: %w", backend.ErrClosed)
	}
	b.cancel()
	done := make(chan struct{})
	go func() { b.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(closeBound):
	}
	if b.ownPool {
		b.pool.Close()
	}
	return nil
}

// Ping implements backend.Pinger: one empty statement on a connection of
// the pool, within ctx.
func (b *Backend) Ping(ctx context.Context) error {
	if b.shut.Load() {
		return fmt.Errorf("postgres: ping: %w", backend.ErrClosed)
	}
	if err := b.pool.Ping(ctx); err != nil {
		return fmt.Errorf("postgres: ping: %w", err)
	}
	return nil
}

// Subscribe joins (creating if needed) the consumer group cfg.Group of
// topic as a new member.
func (b *Backend) Subscribe(ctx context.Context, topic string, cfg backend.SubscribeConfig) (backend.Subscription, error) {
	if b.shut.Load() {
		return nil, fmt.Errorf("postgres: subscribe %q: %w", topic, backend.ErrClosed)
	}
	gid, err := b.ensureGroup(ctx, topic, cfg.Group, cfg.StartFrom)
	if err != nil {
		return nil, fmt.Errorf("postgres: subscribe %q: %w", topic, classify(err))
	}
	b.lis.waitReady(ctx)
	s := newSubscription(b, topic, gid, cfg)
	b.join(ctx, s)
	b.mu.Lock()
	b.trims[topic]++
	b.mu.Unlock()
	b.lis.add(topic, s.wake)
	return s, nil
}

// forget drops a closed subscription's registrations.
func (b *Backend) forget(s *subscription) {
	b.lis.remove(s.topic, s.wake)
	b.leave(s)
	b.mu.Lock()
	if b.trims[s.topic]--; b.trims[s.topic] <= 0 {
		delete(b.trims, s.topic)
	}
	b.mu.Unlock()
}

// ensureGroup returns the id of group on topic, creating the group when
// it does not exist. A new group starting from the oldest message starts
// its cursor before every message; one starting from the newest raises
// the topic's floor and starts its cursor there (startSQL). The topic's
// exclusive lock waits for the writers in flight and keeps new ones out
// until the group is committed.
func (b *Backend) ensureGroup(ctx context.Context, topic, group string, from backend.StartFrom) (int64, error) {
	var gid int64
	err := b.pool.QueryRow(ctx, `SELECT id FROM bus_groups WHERE topic = $1 AND name = $2`, topic, group).Scan(&gid)
	if err == nil {
		return gid, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return 0, err
	}
	err = pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, $2)`, lockTopic, topicLock(topic)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO bus_topics (name) VALUES ($1) ON CONFLICT DO NOTHING`, topic); err != nil {
			return err
		}
		err := tx.QueryRow(ctx, `INSERT INTO bus_groups (topic, name) VALUES ($1, $2) ON CONFLICT DO NOTHING RETURNING id`, topic, group).Scan(&gid)
		if errors.Is(err, pgx.ErrNoRows) {
			return tx.QueryRow(ctx, `SELECT id FROM bus_groups WHERE topic = $1 AND name = $2`, topic, group).Scan(&gid)
		}
		if err != nil || from == backend.StartOldest {
			return err
		}
		_, err = tx.Exec(ctx, startSQL, topic, gid)
		return err
	})
	b.notes.forget(topic)
	return gid, err
}

// startSQL starts the cursor of group $2 of topic $1 after every message
// written so far, under the topic's exclusive lock. It raises the
// topic's floor to the first transaction id not yet assigned (the xmax
// of the statement's snapshot) and sets the cursor to (floor, 0): every
// message committed later, even by a transaction whose id is older, is
// written under the topic's shared lock, after this commit, with an ord
// of at least the floor, so it lies after the cursor; every message that
// is visible now has an ord below it.
const startSQL = `WITH f AS (SELECT pg_snapshot_xmax(pg_current_snapshot()) AS x),
t AS (INSERT INTO bus_topics (name, floor) SELECT $1, x FROM f
    ON CONFLICT (name) DO UPDATE SET floor = greatest(bus_topics.floor, excluded.floor))
UPDATE bus_groups SET cur_ord = (SELECT x FROM f), cur_seq = 0 WHERE id = $2`

// topicLock is the advisory lock key of a topic (or of a key, for
// PublishTx): its 32-bit FNV-1a hash.
func topicLock(s string) int32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(s))
	return int32(h.Sum32())
}

// trimLoop deletes, every TrimInterval, what the topics this backend
// subscribes or published to no longer need, what lies past the bounded
// topics' bounds, and the IDs that left the dedup window.
func (b *Backend) trimLoop(life context.Context) {
	t := time.NewTicker(b.opts.TrimInterval)
	defer t.Stop()
	trimmed := map[string]trimPos{} // where each topic's next trim starts
	over := map[string]bool{}       // bounded topics a pass left over their length
	for {
		select {
		case <-life.Done():
			return
		case <-t.C:
		}
		topics, published, bounded := b.trimTopics()
		var trimmedRows int64 // messages this pass deleted
		if b.opts.Retention == RetainSettled {
			for _, topic := range topics {
				from, ok := trimmed[topic]
				if !ok {
					from = trimPos{ord: "0"}
				}
				ctx, cancel := context.WithTimeout(life, 5*time.Second)
				var deleted int64
				trimmed[topic], deleted = b.trim(ctx, topic, from)
				cancel()
				trimmedRows += deleted
				if published[topic] {
					b.published.Trimmed(topic, deleted, max(10*b.opts.TrimInterval, 5*time.Minute))
				}
			}
			for topic := range trimmed {
				if _, found := slices.BinarySearch(topics, topic); !found {
					delete(trimmed, topic)
				}
			}
		}
		for _, tp := range bounded {
			ctx, cancel := context.WithTimeout(life, 5*time.Second)
			over[tp.Name] = b.trimBound(ctx, tp, over[tp.Name])
			cancel()
		}
		b.mu.Lock()
		subscribed := len(b.trims) > 0
		b.mu.Unlock()
		if subscribed {
			b.vacuum(life)
		}
		if trimmedRows > 0 {
			b.vacuumMessages(life)
		}
		// A key's order record is spent once every transaction that could
		// publish the key again has a larger id.
		ctx, cancel := context.WithTimeout(life, 5*time.Second)
		_, _ = b.pool.Exec(ctx, `DELETE FROM bus_keyord WHERE ord < pg_snapshot_xmin(pg_current_snapshot())`)
		cancel()
		if b.opts.DedupWindow > 0 {
			ctx, cancel := context.WithTimeout(life, 5*time.Second)
			_, _ = b.pool.Exec(ctx, `DELETE FROM bus_dedup WHERE at < clock_timestamp() - $1 * interval '1 millisecond'`, b.opts.DedupWindow.Milliseconds())
			cancel()
		}
	}
}

// trimTopics returns the topics the trimmer trims, subscribed or
// published to, in name order; those of them that are only published to;
// and those with a retention bound.
func (b *Backend) trimTopics() (topics []string, published map[string]bool, bounded []trimset.Topic) {
	pub := b.published.Snapshot()
	b.mu.Lock()
	topics = make([]string, 0, len(b.trims)+len(pub))
	subscribed := make(map[string]bool, len(b.trims))
	for topic := range b.trims {
		topics = append(topics, topic)
		subscribed[topic] = true
	}
	b.mu.Unlock()
	published = map[string]bool{}
	for _, tp := range pub {
		if !subscribed[tp.Name] {
			topics = append(topics, tp.Name)
			published[tp.Name] = true
		}
		if tp.Bound != (backend.RetentionBound{}) {
			bounded = append(bounded, tp)
		}
	}
	slices.Sort(topics)
	return topics, published, bounded
}

// vacuum vacuums bus_deliveries and bus_leases, whose rows live for a
// lease and are deleted by the acks: until a vacuum removes them, their index entries
// lie in the path of the fetches and of the planner's estimates, and
// autovacuum visits a table at most once a naptime (a minute by
// default). The table holds only what is in flight, so a vacuum is
// short; SKIP_LOCKED leaves it to the next round when another process's
// vacuum runs, and TRUNCATE false keeps it from taking the table's
// exclusive lock to give back its empty pages. A role that does not own
// the table gets a warning and no vacuum.
func (b *Backend) vacuum(life context.Context) {
	ctx, cancel := context.WithTimeout(life, 5*time.Second)
	defer cancel()
	_, _ = b.pool.Exec(ctx, `VACUUM (SKIP_LOCKED, TRUNCATE false, PARALLEL 0) bus_deliveries, bus_leases`)
}

// vacuumMessages vacuums bus_messages after a pass of the trimmer
// deleted messages. Autovacuum visits a database once a naptime (a
// minute by default): a topic written and trimmed at a steady rate would
// leave a naptime's worth of dead rows in the table and its key between
// two visits, so that the table, its index and the fetches' and trims'
// scans of the log grow with the rate. Vacuumed after each trim, the
// table keeps about a trim interval's dead rows, and each vacuum has
// little to do: the pages that hold only settled, vacuumed messages are
// all-visible and skipped. Its deadline is longer than the trims', as
// the first vacuum of a table that autovacuum left behind has a large
// backlog to clear; SKIP_LOCKED and TRUNCATE false as in vacuum.
func (b *Backend) vacuumMessages(life context.Context) {
	ctx, cancel := context.WithTimeout(life, 30*time.Second)
	defer cancel()
	_, _ = b.pool.Exec(ctx, `VACUUM (SKIP_LOCKED, TRUNCATE false, PARALLEL 0) bus_messages`)
}

// trim deletes the messages of topic that every group has passed with
// its cursor and that no group holds (a delivery row, or pending in a
// lease), when the topic has groups. A group's cursor only moves in the
// statement that writes the delivery rows and the lease of what it
// passes, and a message moves from a lease to a delivery row in one
// statement, so one snapshot sees a message either before every cursor
// with what holds it or not passed by some group.
// The topic's shared lock keeps a new group or a seek (which move a
// cursor back) out. The delete starts at from, where the last trim of
// this Backend stopped: the first message it kept, or the slowest cursor
// when it kept none. Every message before from is deleted, and none can
// be written there (a new message lies after every cursor, and what lies
// before a cursor is committed), so a trim does not step over what
// earlier trims deleted. It returns where the next trim starts and how
// many messages it deleted.
func (b *Backend) trim(ctx context.Context, topic string, from trimPos) (trimPos, int64) {
	var total int64
	for range trimRounds {
		next, deleted, err := b.trimOnce(ctx, topic, from)
		if err != nil {
			return from, total
		}
		from, total = next, total+deleted
		if deleted < trimBatch {
			break
		}
	}
	return from, total
}

// trimOnce deletes what trim may of the first trimBatch messages from
// from up to the slowest cursor, in a transaction of its own, and
// returns where the next batch starts and how many it deleted. It reads
// the delivery rows that hold the batch's messages once, by a range of
// the key (the groups' ids, the least to the greatest seq of the batch;
// see ackSQL), rather than probing them message by message, and the
// pending seqs of the groups' leases (one row per fetch in flight). It
// deletes the batch's rows by the tuple ids it read them at (a message
// row is never updated, and none of them can be removed and its slot
// reused while the statement's snapshot holds it), so that the delete
// is a lookup of each row whatever plan the statement gets: a range of
// the key bounded by values the planner does not know beforehand is
// estimated as a large part of the table, and a plan made for the
// statement's first parameters (as PostgreSQL makes its first five)
// scans the whole table.
func (b *Backend) trimOnce(ctx context.Context, topic string, from trimPos) (trimPos, int64, error) {
	batch := &pgx.Batch{}
	batch.Queue(`SELECT pg_advisory_xact_lock_shared($1, $2), `+allowDelete, lockTopic, topicLock(topic))
	batch.Queue(trimDeleteSQL, topic, from.ord, from.seq)
	batch.Queue(`WITH lo AS (SELECT cur_ord, cur_seq FROM bus_groups WHERE topic = $1 ORDER BY cur_ord, cur_seq LIMIT 1),
k AS (SELECT ord, seq FROM bus_messages WHERE topic = $1 AND ROW(ord, seq) >= ROW($2::text::xid8, $3::bigint)
    AND ROW(ord, seq) <= ROW((SELECT cur_ord FROM lo), (SELECT cur_seq FROM lo)) ORDER BY ord, seq LIMIT 1)
SELECT ord::text, seq FROM k UNION ALL SELECT cur_ord::text, cur_seq FROM lo WHERE NOT EXISTS (SELECT 1 FROM k)`, topic, from.ord, from.seq)
	br := b.pool.SendBatch(ctx, batch)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return from, 0, err
	}
	tag, err := br.Exec()
	if err != nil {
		return from, 0, err
	}
	next := from
	if err := br.QueryRow().Scan(&next.ord, &next.seq); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return from, 0, err
	}
	return next, tag.RowsAffected(), nil
}

// trimDeleteSQL deletes what trim may of the first trimBatch messages of
// topic $1 from ($2, $3) up to the slowest cursor (see trimOnce).
var trimDeleteSQL = `WITH g AS (SELECT id FROM bus_groups WHERE topic = $1),
lo AS (SELECT cur_ord, cur_seq FROM bus_groups WHERE topic = $1 ORDER BY cur_ord, cur_seq LIMIT 1),
r AS MATERIALIZED (SELECT ctid, seq FROM bus_messages WHERE topic = $1 AND ROW(ord, seq) >= ROW($2::text::xid8, $3::bigint)
    AND ROW(ord, seq) <= ROW((SELECT cur_ord FROM lo), (SELECT cur_seq FROM lo)) ORDER BY ord, seq LIMIT ` + strconv.Itoa(trimBatch) + `),
held AS (SELECT d.seq FROM bus_deliveries d WHERE d.group_id = ANY(ARRAY(SELECT id FROM g))
    AND d.seq BETWEEN (SELECT min(seq) FROM r) AND (SELECT max(seq) FROM r)
    UNION ALL
    SELECT p FROM bus_leases l CROSS JOIN LATERAL unnest(l.pending) AS p WHERE l.group_id = ANY(ARRAY(SELECT id FROM g))
    AND p BETWEEN (SELECT min(seq) FROM r) AND (SELECT max(seq) FROM r))
DELETE FROM bus_messages m
WHERE m.ctid = ANY(ARRAY(SELECT ctid FROM r WHERE seq NOT IN (SELECT seq FROM held)))`

// A trim of a topic deletes in batches of trimBatch messages, each a
// short transaction of its own (a transaction holds back every group's
// deliveries while it runs), at most trimRounds of them a round.
const (
	trimBatch  = 1000
	trimRounds = 50
)

// trimPos is a position in a topic's log: (ord, seq), ord as text.
type trimPos struct {
	ord string
	seq int64
}
