package postgres_test

import (
	"context"
	_ "embed" // the v2 schema
	"fmt"
	"net/url"
	"sort"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/observer"
	"github.com/eventbus-go/bus/postgres"
)

//go:embed testdata/schema_v2.sql
var schemaV2 string

// leaseFixture opens a backend on rawURL and a member of group g of
// topic with ackTimeout, and publishes n messages lease-<i> in one batch.
func leaseFixture(t *testing.T, ctx context.Context, rawURL, topic string, ackTimeout time.Duration, n int) (*postgres.Backend, backend.Subscription) {
	t.Helper()
	be := openBackend(t, ctx, rawURL)
	s, err := be.Subscribe(ctx, topic, backend.SubscribeConfig{Group: "g", StartFrom: backend.StartOldest, AckTimeout: ackTimeout, Observer: observer.Nop()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	msgs := make([]*backend.Message, n)
	for i := range msgs {
		msgs[i] = &backend.Message{ID: fmt.Sprintf("lease-%d", i), Payload: []byte("x")}
	}
	require.NoError(t, be.Publish(ctx, topic, msgs))
	return be, s
}

// receiveN receives until it has n messages or the deadline passes,
// and returns copies of them.
func receiveN(t *testing.T, ctx context.Context, s backend.Subscription, n int, within time.Duration) []*backend.Message {
	t.Helper()
	var got []*backend.Message
	deadline := time.Now().Add(within)
	for len(got) < n && time.Now().Before(deadline) {
		msgs, err := s.Receive(ctx, n-len(got))
		require.NoError(t, err)
		for _, m := range msgs {
			c := *m // the subscription reuses what it returned
			got = append(got, &c)
		}
	}
	require.Len(t, got, n, "received within %v", within)
	return got
}

// leases returns the count of group g's leases of topic and of the seqs
// pending in them.
func leases(t *testing.T, ctx context.Context, be *postgres.Backend, topic string) (rows, pending int) {
	t.Helper()
	require.NoError(t, be.Pool().QueryRow(ctx, `SELECT count(*), coalesce(sum(cardinality(pending)), 0) FROM bus_leases
WHERE group_id = (SELECT id FROM bus_groups WHERE topic = $1 AND name = 'g')`, topic).Scan(&rows, &pending))
	return rows, pending
}

func pendingOf(t *testing.T, ctx context.Context, be *postgres.Backend, topic string) int64 {
	t.Helper()
	gs, err := be.Groups(ctx, topic)
	require.NoError(t, err)
	require.Len(t, gs, 1)
	return int64(gs[0].Pending)
}

func idsOf(msgs []*backend.Message) []string {
	ids := make([]string, 0, len(msgs))
	for _, m := range msgs {
		ids = append(ids, m.ID)
	}
	sort.Strings(ids)
	return ids
}

// testLeasePartialAckExpiry fetches five messages in one lease, acks two
// and lets the lease run out: only the other three come back, as their
// second attempt, and the inspector counts what is pending throughout.
func testLeasePartialAckExpiry(t *testing.T, rawURL string) {
	defer watchdog(t, time.Minute)()
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	const topic = "lease.expiry"
	be, s := leaseFixture(t, ctx, rawURL, topic, 300*time.Millisecond, 5)
	first := receiveN(t, ctx, s, 5, 5*time.Second)
	for _, m := range first {
		assert.Equal(t, 1, m.Attempt, m.ID)
	}
	rows, pending := leases(t, ctx, be, topic)
	assert.Equal(t, 1, rows, "one lease for the fetch")
	assert.Equal(t, 5, pending)
	assert.EqualValues(t, 5, pendingOf(t, ctx, be, topic))
	require.NoError(t, s.Ack(ctx, []backend.AckID{first[0].AckID, first[3].AckID}))
	_, pending = leases(t, ctx, be, topic)
	assert.Equal(t, 3, pending, "the acks leave the lease")
	assert.EqualValues(t, 3, pendingOf(t, ctx, be, topic))

	again := receiveN(t, ctx, s, 3, 10*time.Second)
	assert.Equal(t, []string{first[1].ID, first[2].ID, first[4].ID}, idsOf(again), "only the unacked come back")
	for _, m := range again {
		assert.Equal(t, 2, m.Attempt, m.ID)
	}
	rows, _ = leases(t, ctx, be, topic)
	assert.Zero(t, rows, "the lease that ran out became delivery rows")
	assert.EqualValues(t, 3, pendingOf(t, ctx, be, topic))
	// A settlement of the lease's deliveries is stale now (the lease
	// ran out).
	require.ErrorIs(t, s.Nack(ctx, first[1].AckID, 0), backend.ErrStale)
	require.ErrorIs(t, s.(backend.Extender).Extend(ctx, first[2].AckID), backend.ErrStale)
	acks := make([]backend.AckID, 0, 3)
	for _, m := range again {
		acks = append(acks, m.AckID)
	}
	require.NoError(t, s.Ack(ctx, acks))
	assert.Zero(t, pendingOf(t, ctx, be, topic))
}

// testLeaseSettleOne fetches four messages in one lease and settles
// each differently: a Nack brings one back counted, a Release one
// uncounted, an Extend keeps one leased past the lease's end, and one is
// acked; stale ids are refused.
func testLeaseSettleOne(t *testing.T, rawURL string) {
	defer watchdog(t, time.Minute)()
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	const topic = "lease.settle"
	be, s := leaseFixture(t, ctx, rawURL, topic, 2*time.Second, 4)
	first := receiveN(t, ctx, s, 4, 5*time.Second)
	byID := map[string]*backend.Message{}
	for _, m := range first {
		byID[m.ID] = m
	}
	rows, _ := leases(t, ctx, be, topic)
	require.Equal(t, 1, rows, "one lease for the fetch")

	require.NoError(t, s.Nack(ctx, byID["lease-1"].AckID, 0))
	require.ErrorIs(t, s.Nack(ctx, byID["lease-1"].AckID, 0), backend.ErrStale, "a second settlement of the nacked delivery")
	require.NoError(t, s.(backend.Releaser).Release(ctx, byID["lease-2"].AckID))
	require.NoError(t, s.(backend.Extender).Extend(ctx, byID["lease-3"].AckID))
	_, pending := leases(t, ctx, be, topic)
	assert.Equal(t, 1, pending, "the settled ones left the lease")
	assert.EqualValues(t, 4, pendingOf(t, ctx, be, topic))

	back := receiveN(t, ctx, s, 2, 5*time.Second)
	require.Equal(t, []string{"lease-1", "lease-2"}, idsOf(back))
	for _, m := range back {
		want := map[string]int{"lease-1": 2, "lease-2": 1}[m.ID]
		assert.Equal(t, want, m.Attempt, "attempt of %s", m.ID)
	}
	require.NoError(t, s.Ack(ctx, []backend.AckID{byID["lease-0"].AckID, back[0].AckID, back[1].AckID}))
	// The extended delivery has a leased delivery row of its own now, and
	// a Nack by the id the lease gave it acts on that row.
	var leased bool
	var n int
	require.NoError(t, be.Pool().QueryRow(ctx, `SELECT d.leased, d.n FROM bus_deliveries d JOIN bus_groups g ON g.id = d.group_id
JOIN bus_messages m ON m.topic = g.topic AND m.seq = d.seq WHERE g.topic = $1 AND m.id = 'lease-3'`, topic).Scan(&leased, &n))
	assert.True(t, leased)
	assert.Equal(t, 1, n)
	require.NoError(t, s.Nack(ctx, byID["lease-3"].AckID, 0))
	again := receiveN(t, ctx, s, 1, 5*time.Second)
	assert.Equal(t, "lease-3", again[0].ID)
	assert.Equal(t, 2, again[0].Attempt)
	require.NoError(t, s.Ack(ctx, []backend.AckID{again[0].AckID}))
	assert.Zero(t, pendingOf(t, ctx, be, topic))
}

// testMigrateV2ToV3 migrates a database of schema v2 holding a group
// with a delivery row whose lease ran out and a waiting first delivery,
// and a message after the group's cursor: the migration is idempotent,
// and the group then gets all three, the redelivery counted.
func testMigrateV2ToV3(t *testing.T, rawURL string) {
	defer watchdog(t, time.Minute)()
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, rawURL)
	require.NoError(t, err)
	defer admin.Close(context.Background())
	_, err = admin.Exec(ctx, `CREATE DATABASE bus_v2`)
	require.NoError(t, err)
	u, err := url.Parse(rawURL)
	require.NoError(t, err)
	u.Path = "/bus_v2"
	conn, err := pgx.Connect(ctx, u.String())
	require.NoError(t, err)
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, schemaV2)
	require.NoError(t, err)
	const topic = "v2.topic"
	_, err = conn.Exec(ctx, `INSERT INTO bus_topics (name) VALUES ('`+topic+`');
INSERT INTO bus_messages (topic, ord, id, key, payload, published_at, visible_at)
    SELECT '`+topic+`', pg_current_xact_id(), id, '', 'x', now(), now() FROM unnest(ARRAY['v2-leased', 'v2-waiting']) AS id;
INSERT INTO bus_groups (topic, name, cur_ord, cur_seq)
    SELECT topic, 'g', ord, seq FROM bus_messages WHERE topic = '`+topic+`' ORDER BY ord DESC, seq DESC LIMIT 1;
INSERT INTO bus_deliveries (group_id, seq, ord, visible_at, n, attempt, leased, lease_by)
    SELECT g.id, m.seq, m.ord, now() - interval '1 second', 1, 1, true, 7 FROM bus_groups g, bus_messages m WHERE m.id = 'v2-leased';
INSERT INTO bus_deliveries (group_id, seq, ord, visible_at)
    SELECT g.id, m.seq, m.ord, now() - interval '1 second' FROM bus_groups g, bus_messages m WHERE m.id = 'v2-waiting';
INSERT INTO bus_messages (topic, ord, id, key, payload, published_at, visible_at)
    VALUES ('`+topic+`', pg_current_xact_id(), 'v2-new', '', 'x', now(), now())`)
	require.NoError(t, err)

	require.NoError(t, postgres.Migrate(ctx, conn))
	require.NoError(t, postgres.Migrate(ctx, conn), "again: nothing to do")
	var mark string
	require.NoError(t, conn.QueryRow(ctx, `SELECT obj_description('bus_topics'::regclass)`).Scan(&mark))
	assert.Equal(t, "bus postgres schema v4", mark)

	be, err := postgres.OpenURL(ctx, u)
	require.NoError(t, err)
	defer func() { _ = be.Close() }()
	s, err := be.Subscribe(ctx, topic, backend.SubscribeConfig{Group: "g", StartFrom: backend.StartOldest, AckTimeout: time.Minute, Observer: observer.Nop()})
	require.NoError(t, err)
	defer s.Close()
	got := receiveN(t, ctx, s, 3, 5*time.Second)
	attempts := map[string]int{}
	acks := make([]backend.AckID, 0, 3)
	for _, m := range got {
		attempts[m.ID] = m.Attempt
		acks = append(acks, m.AckID)
	}
	assert.Equal(t, map[string]int{"v2-leased": 2, "v2-waiting": 1, "v2-new": 1}, attempts)

	// The trim of a process of schema v2 sees only bus_deliveries: the
	// guard makes it fail rather than delete what the leases hold.
	_, err = conn.Exec(ctx, `DELETE FROM bus_messages m WHERE m.topic = $1 AND m.seq NOT IN (SELECT seq FROM bus_deliveries)`, topic)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr, "a delete without bus.schema = 3 fails")
	assert.Equal(t, "55000", pgErr.Code)
	var msgs int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM bus_messages WHERE topic = $1`, topic).Scan(&msgs))
	assert.Equal(t, 3, msgs, "and deletes nothing")

	require.NoError(t, s.Ack(ctx, acks))
	assert.Zero(t, pendingOf(t, ctx, be, topic))
	var left int
	require.NoError(t, conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM bus_deliveries) + (SELECT count(*) FROM bus_leases)`).Scan(&left))
	assert.Zero(t, left, "everything settled")
}

// testLeaseConcurrentSettlements fetches 40 messages in one lease and
// settles them from two goroutines at once, one statement each: acks of
// the even ones, nacks of the odd ones. Exactly the odd ones come back,
// as their second attempt; no acked one does.
func testLeaseConcurrentSettlements(t *testing.T, rawURL string) {
	defer watchdog(t, time.Minute)()
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	const topic, n = "lease.concurrent", 40
	be, s := leaseFixture(t, ctx, rawURL, topic, time.Minute, n)
	first := receiveN(t, ctx, s, n, 5*time.Second)
	rows, _ := leases(t, ctx, be, topic)
	require.Equal(t, 1, rows, "one lease for the fetch")
	var nacked []string
	errs := make(chan error, 2)
	go func() {
		for i := 0; i < n; i += 2 {
			if err := s.Ack(ctx, []backend.AckID{first[i].AckID}); err != nil {
				errs <- err
				return
			}
		}
		errs <- nil
	}()
	go func() {
		for i := 1; i < n; i += 2 {
			if err := s.Nack(ctx, first[i].AckID, 0); err != nil {
				errs <- err
				return
			}
		}
		errs <- nil
	}()
	require.NoError(t, <-errs)
	require.NoError(t, <-errs)
	for i := 1; i < n; i += 2 {
		nacked = append(nacked, first[i].ID)
	}
	_, pending := leases(t, ctx, be, topic)
	assert.Zero(t, pending, "nothing is left pending in the lease")
	again := receiveN(t, ctx, s, n/2, 5*time.Second)
	sort.Strings(nacked)
	assert.Equal(t, nacked, idsOf(again), "exactly the nacked ones come back")
	acks := make([]backend.AckID, 0, len(again))
	for _, m := range again {
		assert.Equal(t, 2, m.Attempt, m.ID)
		acks = append(acks, m.AckID)
	}
	require.NoError(t, s.Ack(ctx, acks))
	assert.Zero(t, pendingOf(t, ctx, be, topic))
}
