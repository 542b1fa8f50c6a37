package postgres

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/observer"
)

// ackID names one delivery: the message's seq, the row's delivery
// count when it was handed out, and the tag of the fetch whose lease
// (bus_leases) holds it, 0 when a row of bus_deliveries does. The AckID
// of a delivery is a *ackID.
type ackID struct {
	seq int64
	n   int32
	tag int64
}

// subscription is one member of a group. Receive runs on one goroutine;
// the other methods may run concurrently with it and with each other.
type subscription struct {
	b     *Backend
	topic string
	gid   int64
	cfg   backend.SubscribeConfig
	lease int64 // ms
	wake  chan struct{}

	life   context.Context // ends at Close (of the subscription or the backend)
	cancel context.CancelFunc
	closed atomic.Bool

	// mu guards lost against Close, which gives back what a lost fetch
	// leased when no Receive comes after it.
	mu   sync.Mutex
	lost lostFetch // a fetch whose reply never came; tag 0: none

	// Receive's own state.
	vals []backend.Message
	out  []*backend.Message
	acks []ackID // vals[i]'s
	// drained is when the last fetch, which took all it found (fewer
	// than it could), started; zero when it took none or as many as it
	// could.
	drained time.Time
}

// lostFetch is a fetch whose reply never came: it may have committed,
// leasing rows under its tag, or it may still run at the server.
type lostFetch struct {
	tag int64 // its lease_by
	// pid is the server process of its connection when the client
	// closed that connection with the statement maybe still running; 0
	// when the statement has ended.
	pid uint32
	at  time.Time // when the client found that connection closed
}

var (
	_ backend.Subscription = (*subscription)(nil)
	_ backend.Extender     = (*subscription)(nil)
	_ backend.Releaser     = (*subscription)(nil)
	_ backend.Snoozer      = (*subscription)(nil)
	_ backend.DeadLetterer = (*subscription)(nil)
)

func newSubscription(b *Backend, topic string, gid int64, cfg backend.SubscribeConfig) *subscription {
	life, cancel := context.WithCancel(b.life)
	return &subscription{
		b: b, topic: topic, gid: gid, cfg: cfg,
		lease: max(cfg.AckTimeout.Milliseconds(), 1),
		wake:  make(chan struct{}, 1),
		life:  life, cancel: cancel,
	}
}

func (s *subscription) errClosed(op string) error {
	return fmt.Errorf("postgres: %s %q: %w", op, s.topic, backend.ErrClosed)
}

// fetchSQL leases up to $2 due deliveries of group $1 for $3 ms, tagged
// $4, in one statement. It locks the group's row (its cursor) first, so
// the fetches of a group take turns at the cursor. Redeliveries come
// first (a head whose member died comes back before what follows it),
// then waiting first deliveries that came due (a DeliverAt, a seek), then
// the messages after the cursor in (ord, seq) order whose ord is below
// the xmin of the statement's snapshot: every transaction below it has
// ended, so no message can still commit behind the cursor. The cursor
// passes messages until it has passed as many due ones as there is room
// for, and at most $5 more than that room: messages that are not due
// yet (a DeliverAt ahead) hold back none after them. The messages
// the cursor passes that are due are leased together by one row of
// bus_leases (tagged $4), the others get a waiting delivery row (n = 0)
// due at their DeliverAt. It returns the deliveries with their messages
// and the tag of the lease that holds them (0: a delivery row), in
// delivery order. A delivery whose message is gone (deleted) comes back
// with a NULL id. The first deliveries it returns are read from c, not
// joined back from the rows it writes (a data-modifying CTE runs to
// completion whether it is read or not), and
// the redeliveries it updates are picked by seq = ANY(array) within
// their least and greatest seq (see ackSQL): the planner cannot estimate
// how many rows a CTE holds, and joins two CTEs by comparing every row of
// one with every row of the other.
const fetchSQL = `WITH g AS (
    SELECT id, topic, cur_ord, cur_seq FROM bus_groups WHERE id = $1 FOR UPDATE),
r AS (
    SELECT seq FROM bus_deliveries WHERE group_id = (SELECT id FROM g) AND n > 0 AND visible_at <= statement_timestamp()
    ORDER BY visible_at LIMIT $2 FOR UPDATE SKIP LOCKED),
w AS (
    SELECT seq FROM bus_deliveries WHERE group_id = (SELECT id FROM g) AND n = 0 AND visible_at <= statement_timestamp()
    ORDER BY visible_at, seq LIMIT $2 FOR UPDATE SKIP LOCKED),
a AS (
    SELECT seq FROM (SELECT seq, 0 AS k FROM r UNION ALL SELECT seq, 1 FROM w) a ORDER BY k, seq LIMIT $2),
u AS (
    UPDATE bus_deliveries d SET n = d.n + 1, attempt = d.attempt + 1, leased = true, lease_by = $4,
        visible_at = clock_timestamp() + $3::bigint * interval '1 millisecond'
    WHERE d.group_id = $1 AND d.seq BETWEEN (SELECT min(seq) FROM a) AND (SELECT max(seq) FROM a)
        AND d.seq = ANY(ARRAY(SELECT seq FROM a))
    RETURNING d.seq, d.ord, d.n, d.attempt),
cs AS (
    SELECT m.ord, m.seq, m.visible_at, m.visible_at <= statement_timestamp() AS due,
        m.id, m.key, m.headers, m.payload, m.published_at FROM bus_messages m
    WHERE m.topic = (SELECT topic FROM g) AND ROW(m.ord, m.seq) > ROW((SELECT cur_ord FROM g), (SELECT cur_seq FROM g))
        AND m.ord < pg_snapshot_xmin(pg_current_snapshot())
    ORDER BY m.ord, m.seq LIMIT greatest($2 - (SELECT count(*) FROM a), 0) + $5),
c AS (
    SELECT x.ord, x.seq, x.visible_at, x.due, x.id, x.key, x.headers, x.payload, x.published_at
    FROM (SELECT cs.*, count(*) FILTER (WHERE cs.due) OVER (ORDER BY cs.ord, cs.seq) AS nd FROM cs) x
    WHERE x.nd <= greatest($2 - (SELECT count(*) FROM a), 0)),
i AS (
    INSERT INTO bus_deliveries (group_id, seq, ord, visible_at)
    SELECT $1, c.seq, c.ord, c.visible_at FROM c WHERE NOT c.due ORDER BY c.ord, c.seq),
l AS (
    INSERT INTO bus_leases (group_id, lease_by, visible_at, fetched, ords, pending)
    SELECT $1, $4, clock_timestamp() + $3::bigint * interval '1 millisecond', f.s, f.o, f.s
    FROM (SELECT array_agg(c.seq ORDER BY c.ord, c.seq) AS s, array_agg(c.ord ORDER BY c.ord, c.seq) AS o FROM c WHERE c.due) f
    WHERE f.s IS NOT NULL),
v AS (
    UPDATE bus_groups SET cur_ord = l.ord, cur_seq = l.seq
    FROM (SELECT ord, seq FROM c ORDER BY ord DESC, seq DESC LIMIT 1) l WHERE id = $1),
d AS (
    SELECT u.seq, u.n, u.attempt, 0::bigint AS tag, 0 AS k, m.ord, m.id, m.key, m.headers, m.payload, m.published_at
    FROM u LEFT JOIN bus_messages m ON m.topic = (SELECT topic FROM g) AND m.ord = u.ord AND m.seq = u.seq
    UNION ALL
    SELECT c.seq, 1, 1, $4, 1, c.ord, c.id, c.key, c.headers, c.payload, c.published_at FROM c WHERE c.due)
SELECT seq, n, attempt, tag, id, key, headers, payload, published_at FROM d
ORDER BY n = 1, k, ord, seq`

// expireSQL turns the leases of group $1 that ran out into delivery
// rows: each message still pending in one gets a row leased (n = 1,
// attempt 1) under the lease's tag, its lease over, so that it comes
// back as a redelivery, counted, as a leased row whose lease ran out
// does. A fetch runs it first, in its transaction. It also sets the
// transaction's plan_cache_mode as genericPlanSQL does, for the fetch
// after it (a one-time filter, evaluated whether or not a lease ran out):
// one statement fewer per fetch.
const expireSQL = `WITH e AS (
    DELETE FROM bus_leases WHERE group_id = $1 AND visible_at <= statement_timestamp()
    RETURNING lease_by, visible_at, fetched, ords, pending)
INSERT INTO bus_deliveries (group_id, seq, ord, visible_at, n, attempt, leased, lease_by)
SELECT $1, x.seq, x.ord, e.visible_at, 1, 1, true, e.lease_by
FROM e CROSS JOIN LATERAL unnest(e.fetched, e.ords) AS x(seq, ord)
WHERE x.seq = ANY(e.pending) AND (SELECT set_config('plan_cache_mode', 'force_generic_plan', true)) IS NOT NULL`

// recoverSQL hands out again, with a new lease, what the fetch tagged $3
// leased and never delivered: its delivery rows, and what is pending in
// its lease (which is still the fetch's: the lease restarts). The attempt
// the lost fetch counted is this delivery's: no handler saw the lost one.
// It runs once the lost fetch has ended (see lostEnded).
const recoverSQL = `WITH u AS (
    UPDATE bus_deliveries d SET n = d.n + 1, lease_by = 0,
        visible_at = clock_timestamp() + $2::bigint * interval '1 millisecond'
    WHERE d.group_id = $1 AND d.lease_by = $3 AND d.leased
    RETURNING d.seq, d.ord, d.n, d.attempt),
l AS (
    UPDATE bus_leases SET visible_at = clock_timestamp() + $2::bigint * interval '1 millisecond'
    WHERE group_id = $1 AND lease_by = $3
    RETURNING fetched, ords, pending),
d AS (
    SELECT u.seq, u.n, u.attempt, 0::bigint AS tag, u.ord FROM u
    UNION ALL
    SELECT x.seq, 1, 1, $3, x.ord FROM l CROSS JOIN LATERAL unnest(l.fetched, l.ords) AS x(seq, ord) WHERE x.seq = ANY(l.pending))
SELECT d.seq, d.n, d.attempt, d.tag, m.id, m.key, m.headers, m.payload, m.published_at
FROM d LEFT JOIN bus_messages m ON m.topic = (SELECT topic FROM bus_groups WHERE id = $1) AND m.ord = d.ord AND m.seq = d.seq
ORDER BY d.seq`

// giveBackSQL returns to the group what the fetch tagged $2 leased and
// never delivered, due at once and uncounted, as Release does: a first
// delivery becomes a waiting one again (n = 0, not pending: the member
// that takes the group over next does not wait for it, and fetches it
// before anything after the cursor), a redelivery is given back. It runs
// once the lost fetch has ended (see lostEnded). Every row gets the same
// visible_at (now(), not clock_timestamp(), which moves from row to row),
// so a fetch takes them back in seq order. The fetch's lease becomes a
// waiting delivery row (n = 0) for each message pending in it. It
// returns how many deliveries it gave back.
const giveBackSQL = `WITH l AS (
    DELETE FROM bus_leases WHERE group_id = $1 AND lease_by = $2 RETURNING fetched, ords, pending),
i AS (
    INSERT INTO bus_deliveries (group_id, seq, ord, visible_at)
    SELECT $1, x.seq, x.ord, now() FROM l CROSS JOIN LATERAL unnest(l.fetched, l.ords) AS x(seq, ord)
    WHERE x.seq = ANY(l.pending) RETURNING 1),
u AS (
    UPDATE bus_deliveries SET n = CASE WHEN n = 1 THEN 0 ELSE n END, attempt = attempt - 1,
        leased = false, lease_by = 0, visible_at = now()
    WHERE group_id = $1 AND lease_by = $2 AND leased RETURNING 1)
SELECT (SELECT count(*) FROM i) + (SELECT count(*) FROM u)`

// lostRunsSQL is the condition under which pg_stat_activity's row of
// server process $1 is the one of a lost fetch's connection, which the
// client closed at $2: a process of that number that started before
// then (or whose start the server does not show). Whatever its state,
// it may still run the fetch: an idle one may not have read the fetch
// yet, which the client sent before it gave up, and commits it when it
// does (a cancel request that comes first is ignored). It has ended once
// it is gone. A process of that number that started since is another
// connection's: its number was given again.
const lostRunsSQL = `pid = $1 AND (backend_start IS NULL OR backend_start < $2)`

// endLostSQL ends the server process $1 of a connection the client
// closed at $2 while it may still run the lost fetch (lostRunsSQL):
// whether the fetch commits or not, it runs no longer once the process
// is gone. Without it the process lingers as long as the server does not
// see the connection end (a network partition, a proxy that keeps it).
// It reports whether the process has ended already.
const endLostSQL = `SELECT NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE ` + lostRunsSQL + `),
    (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
        WHERE ` + lostRunsSQL + ` AND usename = current_user AND backend_type = 'client backend')`

// lostEndedSQL reports whether the lost fetch of server process $1 has
// ended (committed or rolled back): see lostRunsSQL.
const lostEndedSQL = `SELECT NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE ` + lostRunsSQL + `)`

// Bounds of the wait for a lost fetch's server process to end: it
// polls every lostPollFirst, doubling up to lostPollMost.
const (
	lostPollFirst = 2 * time.Millisecond
	lostPollMost  = 64 * time.Millisecond
)

// lostEnded ends the server process of the lost fetch l and waits until
// it is gone, within ctx: until then the fetch may still lease rows under
// its tag, after a recovery or a give-back looked for them. It waits at
// most lease: a process still there then is waited for no longer, since
// what the fetch leased is due again by then anyway.
func (b *Backend) lostEnded(ctx context.Context, l lostFetch, lease time.Duration) error {
	if l.pid == 0 {
		return nil
	}
	giveUp := time.NewTimer(lease)
	defer giveUp.Stop()
	var gone bool
	var ended *bool
	if err := b.pool.QueryRow(ctx, endLostSQL, l.pid, l.at).Scan(&gone, &ended); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		gone = false // not allowed to end it (a role's rights): wait for it
	}
	for poll := lostPollFirst; !gone; poll = min(2*poll, lostPollMost) {
		t := time.NewTimer(poll)
		select {
		case <-t.C:
		case <-giveUp.C:
			t.Stop()
			return nil
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		if err := b.pool.QueryRow(ctx, lostEndedSQL, l.pid, l.at).Scan(&gone); err != nil {
			return err
		}
	}
	return nil
}

// giveBackLost gives back, in the background, what the lost fetch l of
// a closed subscription leased: no Receive of it comes to recover them,
// and a member that takes the group (or its partition) over would wait
// for their lease to run out. It waits for the fetch to end first (see
// lostEnded), while the backend is open. The channel it returns is closed
// once the give-back has ended (or was not started).
func (b *Backend) giveBackLost(topic string, gid int64, l lostFetch, lease time.Duration) <-chan struct{} {
	done := make(chan struct{})
	b.mu.Lock()
	if b.shut.Load() {
		b.mu.Unlock()
		close(done)
		return done
	}
	b.wg.Add(1)
	b.mu.Unlock()
	go func() {
		defer b.wg.Done()
		defer close(done)
		ctx, cancel := context.WithTimeout(b.life, lease+closeBound)
		defer cancel()
		if err := b.lostEnded(ctx, l, lease); err != nil {
			return // the rows come back after their lease
		}
		var n int64
		err := b.pool.QueryRow(ctx, giveBackSQL, gid, l.tag).Scan(&n)
		if err == nil && n > 0 {
			b.dueSoon(topic, 0)
		}
	}()
	return done
}

// nextDueSQL returns how many ms until the next delivery row or lease of
// group $1 becomes due (a waiting first delivery, a lease that ends, a
// nack's delay) within the next $2 ms (NULL when none does), whether a
// message lies after the group's cursor, and whether the first one does
// below the xmin of the statement's snapshot: a fetch can pass it now
// (the fetch before passed only messages not due yet, as many as it
// could); otherwise it waits for its writer's transaction, or one older,
// to end.
// It reads the rows due from a second ago to $2 ms ahead only: the
// fetch just took what was due, and a wider range would step over the
// index entries of every delivery settled since the last vacuum.
const nextDueSQL = `WITH w AS (SELECT clock_timestamp() - interval '1 second' AS lo, clock_timestamp() + $2::bigint * interval '1 millisecond' AS hi)
SELECT extract(epoch FROM least(
    (SELECT min(visible_at) FROM bus_deliveries WHERE group_id = $1 AND n = 0
        AND visible_at > (SELECT lo FROM w) AND visible_at <= (SELECT hi FROM w)),
    (SELECT min(visible_at) FROM bus_deliveries WHERE group_id = $1 AND n > 0
        AND visible_at > (SELECT lo FROM w) AND visible_at <= (SELECT hi FROM w)),
    (SELECT min(visible_at) FROM bus_leases WHERE group_id = $1
        AND visible_at > (SELECT lo FROM w) AND visible_at <= (SELECT hi FROM w))) - clock_timestamp()) * 1000,
    h.ord IS NOT NULL, coalesce(h.ord < pg_snapshot_xmin(pg_current_snapshot()), false)
FROM (SELECT (SELECT m.ord FROM bus_messages m WHERE m.topic = (SELECT topic FROM bus_groups WHERE id = $1)
        AND ROW(m.ord, m.seq) > ROW((SELECT cur_ord FROM bus_groups WHERE id = $1), (SELECT cur_seq FROM bus_groups WHERE id = $1))
        ORDER BY m.ord, m.seq LIMIT 1) AS ord) h`

// passAhead is how many messages not due yet a fetch may pass beyond
// the due ones it has room for, after a fetch that found only such
// messages: each becomes a waiting delivery row.
const passAhead = 1024

// Bounds of the wait for a message held back behind a running
// transaction: it starts at heldFirst and doubles up to heldMost.
const (
	heldFirst = time.Millisecond
	heldMost  = 32 * time.Millisecond
)

// drainedWait bounds the wait of a Receive that follows a fetch that
// took all it found: it fetches once a notification of the topic came
// (one follows every commit that publishes to it or gives a delivery
// back), or drainedWait after that fetch started, for what comes due
// unannounced (a lease that ends, a DeliverAt, a message held back
// behind a transaction).
const drainedWait = 5 * time.Millisecond

// Receive leases up to max due deliveries. After a fetch that took all
// it found (fewer than it asked for) it waits for a notification of the
// topic first, at most drainedWait: a stream of small publishes is
// fetched in fewer, larger fetches, and a consumer that found nothing
// still fetches at once when notified. With none due it waits for a
// notification of the topic, for the next due time, or for the block
// time, whichever comes first, and looks again once.
func (s *subscription) Receive(ctx context.Context, max int) ([]*backend.Message, error) {
	if s.closed.Load() || s.b.shut.Load() {
		return nil, s.errClosed("receive")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.life, cancel)
	defer stop()
	s.mu.Lock()
	lost := s.lost
	s.mu.Unlock()
	if lost.tag != 0 {
		if err := s.b.lostEnded(ctx, lost, time.Duration(s.lease)*time.Millisecond); err != nil {
			return nil, s.receiveErr(ctx, err)
		}
		msgs, err := s.query(ctx, nil, false, recoverSQL, s.gid, s.lease, lost.tag)
		if err != nil {
			return nil, s.receiveErr(ctx, err)
		}
		s.setLost(lostFetch{})
		if len(msgs) > 0 {
			return msgs, nil
		}
	}
	if wait := drainedWait - time.Since(s.drained); !s.drained.IsZero() && wait > 0 {
		if err := s.await(ctx, wait); err != nil {
			return nil, s.receiveErr(ctx, err)
		}
	}
	deadline := time.Now().Add(s.b.opts.Block)
	held := heldFirst
	ahead := 0 // how many messages not due a fetch may pass beyond its room
	for {
		// Drain a stale signal: this fetch sees what it announced.
		select {
		case <-s.wake:
		default:
		}
		tag := rand.Int64N(1<<62) + 1
		var pid uint32
		start := time.Now()
		s.drained = time.Time{}
		msgs, err := s.query(ctx, &pid, true, fetchSQL, s.gid, max, s.lease, tag, ahead)
		if err != nil {
			s.setLost(lostFetch{tag: tag, pid: pid, at: time.Now()})
			return nil, s.receiveErr(ctx, err)
		}
		if len(msgs) > 0 {
			if len(msgs) < max {
				s.drained = start
			}
			return msgs, nil
		}
		wait := time.Until(deadline)
		if wait <= 0 {
			return nil, nil
		}
		var due *float64
		var behind, ready bool
		if err := s.b.pool.QueryRow(ctx, nextDueSQL, s.gid, wait.Milliseconds()+1).Scan(&due, &behind, &ready); err != nil {
			return nil, s.receiveErr(ctx, err)
		}
		if ready {
			// The fetch passed only messages not due yet: pass the
			// others at once, many at a time.
			ahead = passAhead
			continue
		}
		if due != nil {
			wait = min(wait, time.Duration(*due*float64(time.Millisecond))+time.Millisecond)
		}
		if behind {
			// A message waits for a transaction to end: look again soon,
			// less often the longer it takes.
			wait = min(wait, held)
			held = min(2*held, heldMost)
		}
		if err := s.await(ctx, wait); err != nil {
			return nil, s.receiveErr(ctx, err)
		}
	}
}

// await waits for a notification of the topic, for wait (none when it
// is not positive) or for ctx, whichever comes first, and returns ctx's
// error when it ended.
func (s *subscription) await(ctx context.Context, wait time.Duration) error {
	if wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-s.wake:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
	return ctx.Err()
}

// receiveErr is what Receive returns for err: ErrClosed after Close, the
// caller's ctx error when it ended, err otherwise.
func (s *subscription) receiveErr(ctx context.Context, err error) error {
	if s.closed.Load() || s.b.shut.Load() {
		return s.errClosed("receive")
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("postgres: receive %q: %w", s.topic, classify(err))
}

// setLost records the lost fetch l (tag 0: none). After Close, no
// Receive comes to recover what it leased: it is given back instead.
func (s *subscription) setLost(l lostFetch) {
	s.mu.Lock()
	closed := s.closed.Load()
	if !closed {
		s.lost = l
	}
	s.mu.Unlock()
	if closed && l.tag != 0 {
		s.b.giveBackLost(s.topic, s.gid, l, time.Duration(s.lease)*time.Millisecond)
	}
}

// query runs a fetch and returns its messages; deliveries whose message
// is gone or does not decode are settled (and dead-lettered) here. With
// expire, expireSQL runs first, in the same transaction. When it fails
// with its connection closed by the client, the statement may still run
// at the server: *running (when not nil) is then set to the server
// process of the connection (see lostFetch).
func (s *subscription) query(ctx context.Context, running *uint32, expire bool, sql string, args ...any) ([]*backend.Message, error) {
	conn, err := s.b.pool.Acquire(ctx)
	if err != nil {
		return nil, err // nothing was sent
	}
	defer conn.Release()
	msgs, err := s.read(ctx, conn, expire, sql, args...)
	if err != nil && running != nil && conn.Conn().PgConn().IsClosed() {
		*running = conn.Conn().PgConn().PID()
	}
	return msgs, err
}

// read runs query sql on conn; see query.
func (s *subscription) read(ctx context.Context, conn *pgxpool.Conn, expire bool, sql string, args ...any) ([]*backend.Message, error) {
	var rows pgx.Rows
	var err error
	var br pgx.BatchResults
	if expire {
		// One transaction, which commits when the batch is read to its
		// end (br.Close): what is settled below sees what it leased. The
		// fetch keeps its generic plan: PostgreSQL would otherwise plan
		// it anew after each ANALYZE of the tables it reads, five times.
		batch := &pgx.Batch{}
		batch.Queue(expireSQL, s.gid)
		batch.Queue(sql, args...)
		br = conn.SendBatch(ctx, batch)
		defer br.Close()
		if _, err := br.Exec(); err != nil {
			return nil, err
		}
		rows, err = br.Query()
	} else {
		rows, err = conn.Query(ctx, sql, args...)
	}
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	s.vals = s.vals[:0]
	s.acks = s.acks[:0]
	var gone []ackID
	type bad struct {
		id  ackID
		msg backend.Message
	}
	var malformed []bad
	dec := newRawDecoder(rows)
	var r fetchRow
	for rows.Next() {
		if err := dec.next(rows, &r); err != nil {
			return nil, err
		}
		if r.gone {
			gone = append(gone, r.a)
			continue
		}
		m := backend.Message{ID: string(r.id), Key: string(r.key), Payload: copyBytes(r.payload), Attempt: int(max(r.attempt, 1))}
		if r.hasAt {
			m.PublishedAt = r.at
		}
		h, err := decodeHeaders(r.headers)
		if err != nil {
			malformed = append(malformed, bad{r.a, m})
			continue
		}
		m.Headers = h
		s.vals = append(s.vals, m)
		s.acks = append(s.acks, r.a)
	}
	// The AckIDs point into one slice of this fetch's own.
	acks := slices.Clone(s.acks)
	for i := range s.vals {
		s.vals[i].AckID = &acks[i]
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows.Close()
	if br != nil {
		if err := br.Close(); err != nil {
			return nil, err
		}
	}
	if len(gone) > 0 {
		s.settleGone(ctx, gone)
	}
	for _, b := range malformed {
		s.deadLetterMalformed(ctx, b.id, &b.msg)
	}
	s.out = s.out[:0]
	for i := range s.vals {
		s.out = append(s.out, &s.vals[i])
	}
	return s.out, nil
}

// ackIDOf returns the delivery id names; false when id is not a
// *ackID.
func ackIDOf(id backend.AckID) (ackID, bool) {
	a, ok := id.(*ackID)
	if !ok || a == nil {
		return ackID{}, false
	}
	return *a, true
}

// settleGone settles the deliveries of messages deleted while the group
// held them, and reports them.
func (s *subscription) settleGone(ctx context.Context, ids []ackID) {
	if err := s.ack(ctx, ids); err != nil {
		return // they come back after their lease
	}
	s.cfg.Observer.Observe(ctx, observer.Event{
		Scope: observer.ScopeReclaim, Topic: s.topic, Group: s.cfg.Group,
		Err: fmt.Errorf("postgres: %d message(s) of %q were deleted before the group settled them", len(ids), s.topic),
	})
}

// deadLetterMalformed settles a delivery whose stored headers do not
// decode: it is dead-lettered (when the group has a dead-letter topic) or
// acked, and reported; it never reaches the handler.
func (s *subscription) deadLetterMalformed(ctx context.Context, id ackID, m *backend.Message) {
	err := fmt.Errorf("postgres: message seq %d of %q: %w", id.seq, s.topic, errBadHeaders)
	s.cfg.Observer.Observe(ctx, observer.Event{Scope: observer.ScopeDecode, Topic: s.topic, Group: s.cfg.Group, MessageID: m.ID, Err: err})
	if s.cfg.DeadLetterTopic != "" {
		dl := backend.NewDeadLetter(m, backend.DeadLetterInfo{
			Topic: s.topic, Group: s.cfg.Group, Attempt: m.Attempt, Code: backend.CodeMalformed, Reason: err.Error(),
		})
		_ = s.DeadLetter(ctx, &id, s.cfg.DeadLetterTopic, dl)
		return
	}
	_ = s.Ack(ctx, []backend.AckID{&id})
}

// ackSQL settles group $1's seqs $4, whose least is $2 and greatest $3:
// it takes them out of the pending seqs of the group's leases tagged $5
// (deleting a lease left with none, updating the others) and deletes
// their delivery rows. The bounds make the key's range the index search:
// PostgreSQL before 17 may search (group_id, seq) by group_id alone and
// test seq = ANY as a filter, reading every row of the group, the
// settled ones that no vacuum has removed yet among them. The delivery
// rows go whatever the ids' tags: a stale Ack (of a lease that ran out
// and became delivery rows) still settles. A lease the snapshot shows
// with nothing pending but the acked seqs is deleted, every other one
// updated (the update's condition holds for a newer version of the row
// too, so a concurrent settlement of the same lease cannot make the ack
// skip it; the lease is then left empty until it runs out). The seqs
// are matched through a hashed subplan of a, not with array operators,
// which compare every element of one array with every one of the other.
const ackSQL = `WITH a AS MATERIALIZED (SELECT unnest($4::bigint[]) AS seq),
x AS (
    DELETE FROM bus_leases WHERE group_id = $1 AND lease_by = ANY($5)
        AND NOT EXISTS (SELECT 1 FROM unnest(pending) AS p WHERE p NOT IN (SELECT seq FROM a)) RETURNING lease_by),
y AS (
    UPDATE bus_leases SET pending = ARRAY(SELECT p FROM unnest(pending) AS p WHERE p NOT IN (SELECT seq FROM a))
    WHERE group_id = $1 AND lease_by = ANY($5) AND lease_by <> ALL(ARRAY(SELECT lease_by FROM x))
        AND EXISTS (SELECT 1 FROM unnest(pending) AS p WHERE p IN (SELECT seq FROM a)) RETURNING 1)
DELETE FROM bus_deliveries WHERE group_id = $1 AND seq BETWEEN $2 AND $3 AND seq = ANY($4)`

// Ack settles the deliveries: the group is done with the messages.
func (s *subscription) Ack(ctx context.Context, ids []backend.AckID) error {
	if len(ids) == 0 {
		return nil
	}
	as := make([]ackID, 0, len(ids))
	for _, id := range ids {
		a, ok := ackIDOf(id)
		if !ok {
			return fmt.Errorf("postgres: ack %q: foreign AckID %T", s.topic, id)
		}
		as = append(as, a)
	}
	if err := s.ack(ctx, as); err != nil {
		return fmt.Errorf("postgres: ack %q: %w", s.topic, classify(err))
	}
	return nil
}

// genericPlanSQL makes the statements after it in its transaction use
// their prepared statement's generic plan. ackSQL needs it: its cost
// estimate for an array of tags of unknown length is higher than for
// the one or two tags an ack carries, so PostgreSQL would otherwise plan
// each ack anew (longer than it takes to run), for the same plan.
const genericPlanSQL = `SELECT set_config('plan_cache_mode', 'force_generic_plan', true)`

// ack runs ackSQL for ids, with its generic plan, in one transaction.
func (s *subscription) ack(ctx context.Context, ids []ackID) error {
	return s.b.pool.SendBatch(ctx, s.ackBatch(ids)).Close()
}

// ackBatch is the batch that acks ids (one implicit transaction): ackSQL
// with its generic plan.
func (s *subscription) ackBatch(ids []ackID) *pgx.Batch {
	seqs := make([]int64, 0, len(ids))
	var tags []int64
	for _, a := range ids {
		seqs = append(seqs, a.seq)
		if a.tag != 0 && !slices.Contains(tags, a.tag) {
			tags = append(tags, a.tag)
		}
	}
	if tags == nil {
		tags = []int64{}
	}
	batch := &pgx.Batch{}
	batch.Queue(genericPlanSQL)
	batch.Queue(ackSQL, s.gid, slices.Min(seqs), slices.Max(seqs), seqs, tags)
	return batch
}

// leasedSQL is the condition every settlement but Ack checks: the row is
// still this delivery ($3: its count), leased, within its lease.
const leasedSQL = `group_id = $1 AND seq = $2 AND n = $3 AND leased AND visible_at > clock_timestamp()`

// splitSQL is the CTE every settlement but Ack starts with: it takes seq
// $2 out of the pending seqs of group $1's lease tagged $tagP when the
// delivery ($3) is the lease's first one and the lease has not run out,
// and returns the message's ord. The settlement writes the message's
// delivery row from it, in the same statement; otherwise it acts on the
// delivery row (leasedSQL), which the delivery has when an Extend moved
// it out of its lease.
func splitSQL(tagP string) string {
	return `l AS (
    UPDATE bus_leases SET pending = array_remove(pending, $2::bigint)
    WHERE group_id = $1 AND lease_by = ` + tagP + ` AND $3 = 1 AND pending @> ARRAY[$2::bigint] AND visible_at > clock_timestamp()
    RETURNING ords[array_position(fetched, $2::bigint)] AS ord)`
}

// giveBackOneSQL ends the lease of delivery ($2, $3), tagged $6: the
// message is due after $4 µs, and its attempt drops by $5. It returns
// how many deliveries it changed (0: stale).
var giveBackOneSQL = `WITH ` + splitSQL("$6") + `,
i AS (
    INSERT INTO bus_deliveries (group_id, seq, ord, visible_at, n, attempt, leased, lease_by)
    SELECT $1, $2, l.ord, clock_timestamp() + $4::bigint * interval '1 microsecond', 1, 1 - $5, false, 0 FROM l RETURNING 1),
u AS (
    UPDATE bus_deliveries SET leased = false, lease_by = 0, attempt = attempt - $5,
        visible_at = clock_timestamp() + $4::bigint * interval '1 microsecond' WHERE ` + leasedSQL + ` RETURNING 1)
SELECT (SELECT count(*) FROM i) + (SELECT count(*) FROM u)`

// extendSQL restarts the lease of delivery ($2, $3), tagged $5, for $4
// ms; a delivery of a lease moves out of it into a leased delivery row.
// It returns how many deliveries it changed (0: stale).
var extendSQL = `WITH ` + splitSQL("$5") + `,
i AS (
    INSERT INTO bus_deliveries (group_id, seq, ord, visible_at, n, attempt, leased, lease_by)
    SELECT $1, $2, l.ord, clock_timestamp() + $4::bigint * interval '1 millisecond', 1, 1, true, 0 FROM l RETURNING 1),
u AS (
    UPDATE bus_deliveries SET visible_at = clock_timestamp() + $4::bigint * interval '1 millisecond' WHERE ` + leasedSQL + ` RETURNING 1)
SELECT (SELECT count(*) FROM i) + (SELECT count(*) FROM u)`

// Nack makes the message due again after delay, counted.
func (s *subscription) Nack(ctx context.Context, id backend.AckID, delay time.Duration) error {
	return s.giveBack(ctx, "nack", id, delay, 0)
}

// Release makes the message due again at once, uncounted.
func (s *subscription) Release(ctx context.Context, id backend.AckID) error {
	return s.giveBack(ctx, "release", id, 0, 1)
}

// Snooze makes the message due again after delay, uncounted.
func (s *subscription) Snooze(ctx context.Context, id backend.AckID, delay time.Duration) error {
	return s.giveBack(ctx, "snooze", id, delay, 1)
}

// giveBack ends the lease of a delivery: the row is due after delay, and
// its attempt drops by uncount.
func (s *subscription) giveBack(ctx context.Context, op string, id backend.AckID, delay time.Duration, uncount int) error {
	a, ok := ackIDOf(id)
	if !ok {
		return fmt.Errorf("postgres: %s %q: foreign AckID %T", op, s.topic, id)
	}
	delay = min(max(delay, 0), backend.MaxDelay)
	var n int64
	err := s.b.pool.QueryRow(ctx, giveBackOneSQL, s.gid, a.seq, a.n, delay.Microseconds(), uncount, a.tag).Scan(&n)
	if err != nil {
		return fmt.Errorf("postgres: %s %q: %w", op, s.topic, classify(err))
	}
	if n == 0 {
		return fmt.Errorf("postgres: %s %q: %w", op, s.topic, backend.ErrStale)
	}
	s.b.dueSoon(s.topic, delay)
	return nil
}

// Extend restarts the lease with this subscription's ack timeout.
func (s *subscription) Extend(ctx context.Context, id backend.AckID) error {
	a, ok := ackIDOf(id)
	if !ok {
		return fmt.Errorf("postgres: extend %q: foreign AckID %T", s.topic, id)
	}
	var n int64
	err := s.b.pool.QueryRow(ctx, extendSQL, s.gid, a.seq, a.n, s.lease, a.tag).Scan(&n)
	if err != nil {
		return fmt.Errorf("postgres: extend %q: %w", s.topic, classify(err))
	}
	if n == 0 {
		return fmt.Errorf("postgres: extend %q: %w", s.topic, backend.ErrStale)
	}
	return nil
}

// DeadLetter settles the delivery (its delivery row, or its place in
// its lease) and writes msg to topic in one transaction; a stale id
// writes nothing.
func (s *subscription) DeadLetter(ctx context.Context, id backend.AckID, topic string, msg *backend.Message) error {
	a, ok := ackIDOf(id)
	if !ok {
		return fmt.Errorf("postgres: dead-letter %q: foreign AckID %T", s.topic, id)
	}
	p := publisher{channel: s.b.pub.channel} // no dedup: a message may be dead-lettered again after a replay
	args := append(p.args(topic, p.rowsOf([]*backend.Message{msg}, false)), s.gid, a.seq, a.n, a.tag)
	n, _, err := s.b.insertLocked(ctx, topic, deadLetterSQL, args)
	if err != nil {
		return fmt.Errorf("postgres: dead-letter %q: %w", s.topic, classify(err))
	}
	if n == 0 {
		return fmt.Errorf("postgres: dead-letter %q: %w", s.topic, backend.ErrStale)
	}
	return nil
}

// deadLetterSQL writes a message from arraysSource once it settled
// delivery ($12, $13) of group $11, tagged $14.
var deadLetterSQL = insertSQL(`gl AS (
    UPDATE bus_leases SET pending = array_remove(pending, $12::bigint)
    WHERE group_id = $11 AND lease_by = $14 AND $13 = 1 AND pending @> ARRAY[$12::bigint] AND visible_at > clock_timestamp()
    RETURNING 1),
gd AS (
    DELETE FROM bus_deliveries WHERE group_id = $11 AND seq = $12 AND n = $13 AND leased
        AND visible_at > clock_timestamp() RETURNING 1),
guard AS (SELECT 1 FROM gl UNION ALL SELECT 1 FROM gd)`, arraysSource, 9, 10, 0, 0)

// Close ends the member: a Receive in progress returns an error wrapping
// backend.ErrClosed. Unsettled deliveries stay leased and come back after
// their lease. What a fetch whose reply was lost (one a Close or a
// cancelled ctx cut short) leased is given back, due at once and
// uncounted, before Close returns: the member that takes the group (or
// the partition) over next, once the bus releases the lock after this
// Close, fetches it before anything after it. Close waits for that
// give-back at most one lease (the ack timeout) plus closeBound, as long
// as it may take; the bus bounds the wait by the ctx of its Close, past
// which the give-back goes on in the background while the backend is
// open. Close does no other I/O.
func (s *subscription) Close() error {
	s.mu.Lock()
	if s.closed.Swap(true) {
		s.mu.Unlock()
		return nil
	}
	lost := s.lost
	s.lost = lostFetch{}
	s.mu.Unlock()
	s.cancel()
	s.b.forget(s)
	if lost.tag != 0 {
		lease := time.Duration(s.lease) * time.Millisecond
		done := s.b.giveBackLost(s.topic, s.gid, lost, lease)
		t := time.NewTimer(lease + closeBound)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
		}
	}
	return nil
}
