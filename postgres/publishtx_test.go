package postgres_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	neturl "net/url"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/observer"
	"github.com/eventbus-go/bus/postgres"
)

// watchdog fails the test with a message if it is still running after d.
func watchdog(t *testing.T, d time.Duration) func() {
	t.Helper()
	name := t.Name()
	timer := time.AfterFunc(d, func() {
		panic(fmt.Sprintf("watchdog: %s did not finish within %v", name, d))
	})
	return func() { timer.Stop() }
}

// groupG is the group most tests subscribe: g, from the oldest message,
// with a lease of 30 s (far longer than they run) and no events.
var groupG = backend.SubscribeConfig{Group: "g", StartFrom: backend.StartOldest, AckTimeout: 30 * time.Second, Observer: observer.Nop()}

// testCtx starts a watchdog of a minute for t and returns a ctx of 30 s;
// both end with the test.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	stop := watchdog(t, time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(func() {
		cancel()
		stop()
	})
	return ctx
}

// openBus opens a bus on url, closed when the test ends.
func openBus(t *testing.T, url string, opts ...bus.Option) *bus.Bus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := bus.Open(ctx, url, opts...)
	require.NoError(t, err, "open the bus")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = b.Close(ctx)
	})
	return b
}

// openBackend opens the backend on rawURL, closed when the test ends.
func openBackend(t *testing.T, ctx context.Context, rawURL string) *postgres.Backend {
	t.Helper()
	u, err := neturl.Parse(rawURL)
	require.NoError(t, err)
	be, err := postgres.OpenURL(ctx, u)
	require.NoError(t, err, "open the backend")
	t.Cleanup(func() { _ = be.Close() })
	return be
}

// collector records what a subscription received, in order.
type collector struct {
	mu  sync.Mutex
	ids []string
	got map[string]int
}

func collect(t *testing.T, b *bus.Bus, topic, group string) *collector {
	t.Helper()
	c := &collector{got: map[string]int{}}
	_, err := b.Subscribe(context.Background(), topic, func(_ context.Context, d *bus.Delivery) error {
		c.mu.Lock()
		c.ids = append(c.ids, d.ID)
		c.got[d.ID]++
		c.mu.Unlock()
		return nil
	}, bus.WithGroup(group), bus.WithStartFrom(bus.StartOldest), bus.WithKeyOrdering())
	require.NoError(t, err)
	return c
}

func (c *collector) has(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.got[id] > 0
}

func (c *collector) order() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.ids...)
}

func TestPublishTxRefusesBadInputBeforeIO(t *testing.T) {
	ctx := context.Background()
	err := postgres.PublishTx(ctx, nil, "orders", &bus.Message{})
	require.ErrorIs(t, err, bus.ErrInvalidOption, "a nil transaction")
	err = postgres.PublishSQL(ctx, (*sql.Tx)(nil), "bad topic!", &bus.Message{})
	require.ErrorIs(t, err, bus.ErrInvalidTopic, "a bad topic is refused before the transaction is used")
	var noTx pgx.Tx = failingTx{}
	err = postgres.PublishTx(ctx, noTx, "orders", &bus.Message{Headers: map[string]string{"bus-x": "reserved"}})
	var pe *bus.PublishError
	require.ErrorAs(t, err, &pe, "a reserved header is refused as bus.Publish refuses it")
	assert.True(t, pe.Rejected)
	assert.ErrorIs(t, err, bus.ErrInvalidMessage)
}

// failingTx is a transaction whose every use fails the test.
type failingTx struct{ pgx.Tx }

// testPublishTxCommitOrder writes
// a key in two transactions that commit in the opposite order of their
// start (and of their transaction ids): the group receives the key in commit order; a rolled-back
// PublishTx (pgx and database/sql) is never delivered.
func testPublishTxCommitOrder(t *testing.T, url string) {
	ctx := testCtx(t)
	b := openBus(t, url)
	topic := "tx.order"
	c := collect(t, b, topic, "g")

	conn1, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn1.Close(context.Background())
	conn2, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn2.Close(context.Background())

	// tx1 starts first and takes its transaction id first; tx2 publishes
	// the same key first, so tx1 waits for tx2's commit and comes after
	// it, although its id is the smaller.
	tx1, err := conn1.Begin(ctx)
	require.NoError(t, err)
	_, err = tx1.Exec(ctx, `SELECT pg_current_xact_id()`)
	require.NoError(t, err)
	tx2, err := conn2.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, postgres.PublishTx(ctx, tx2, topic, &bus.Message{ID: "second-started", Key: "k", Payload: []byte("a")}))
	done := make(chan error, 1)
	go func() {
		done <- postgres.PublishTx(ctx, tx1, topic, &bus.Message{ID: "first-started", Key: "k", Payload: []byte("b")})
	}()
	select {
	case err := <-done:
		t.Fatalf("the second writer of a key did not wait for the first's commit: %v", err)
	case <-time.After(100 * time.Millisecond): // it waits; proven by the order below
	}
	require.NoError(t, tx2.Commit(ctx))
	require.NoError(t, <-done)
	require.NoError(t, tx1.Commit(ctx))

	rb, err := conn1.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, postgres.PublishTx(ctx, rb, topic, &bus.Message{ID: "rolled-back", Key: "k"}))
	require.NoError(t, rb.Rollback(ctx))

	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	defer db.Close()
	stx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	require.NoError(t, postgres.PublishSQL(ctx, stx, topic, &bus.Message{ID: "sql-rolled-back", Key: "k"}))
	require.NoError(t, stx.Rollback())
	stx, err = db.BeginTx(ctx, nil)
	require.NoError(t, err)
	require.NoError(t, postgres.PublishSQL(ctx, stx, topic, &bus.Message{ID: "sql-committed", Key: "k"}))
	require.NoError(t, stx.Commit())

	require.Eventually(t, func() bool { return c.has("sql-committed") }, 10*time.Second, 5*time.Millisecond, "the committed messages arrive")
	assert.Equal(t, []string{"second-started", "first-started", "sql-committed"}, c.order(),
		"a key arrives in commit order, and rolled-back messages never")
}

var _ = stdlib.GetDefaultDriver

// testPublishTxLateCommit holds a PublishTx transaction open while other
// messages are published and delivered around it, then commits it: the
// group's cursor has not passed its message, which arrives once, as does
// everything published meanwhile. The transaction takes its id before a
// group starting at the newest message is created, and publishes after:
// that group receives its message too, but not what came before it.
func testPublishTxLateCommit(t *testing.T, url string) {
	ctx := testCtx(t)
	b := openBus(t, url)
	topic := "tx.late"
	old := collect(t, b, topic, "old")
	require.NoError(t, b.Publish(ctx, topic, &bus.Message{ID: "before", Payload: []byte("x")}))
	require.Eventually(t, func() bool { return old.has("before") }, 10*time.Second, 5*time.Millisecond, "the first message arrives")

	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SELECT pg_current_xact_id()`)
	require.NoError(t, err)
	newest := &collector{got: map[string]int{}}
	_, err = b.Subscribe(ctx, topic, func(_ context.Context, d *bus.Delivery) error {
		newest.mu.Lock()
		newest.ids = append(newest.ids, d.ID)
		newest.got[d.ID]++
		newest.mu.Unlock()
		return nil
	}, bus.WithGroup("newest"), bus.WithStartFrom(bus.StartNewest))
	require.NoError(t, err)
	require.NoError(t, postgres.PublishTx(ctx, tx, topic, &bus.Message{ID: "late", Payload: []byte("x")}))
	for i := range 20 {
		require.NoError(t, b.Publish(ctx, topic, &bus.Message{ID: fmt.Sprintf("around-%d", i), Payload: []byte("x")}))
	}
	require.NoError(t, tx.Commit(ctx))
	require.NoError(t, b.Publish(ctx, topic, &bus.Message{ID: "after", Payload: []byte("x")}))

	all := func(c *collector) bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.got["late"] > 0 && c.got["around-19"] > 0 && c.got["after"] > 0
	}
	require.Eventually(t, func() bool { return all(old) && all(newest) }, 10*time.Second, 5*time.Millisecond,
		"the late commit and everything around it arrive")
	old.mu.Lock()
	defer old.mu.Unlock()
	assert.Len(t, old.got, 23, "the old group receives every message")
	for id, n := range old.got {
		assert.Equal(t, 1, n, "%s is delivered once", id)
	}
	newest.mu.Lock()
	defer newest.mu.Unlock()
	assert.Len(t, newest.got, 22, "the newest group receives what was published after it started")
	assert.NotContains(t, newest.got, "before", "a group starting at the newest message skips what came before it")
}

// testMigrateRefusesV1 checks that Migrate refuses a database holding the
// first layout of the tables, before changing anything.
func testMigrateRefusesV1(t *testing.T, url string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer admin.Close(context.Background())
	_, err = admin.Exec(ctx, `CREATE DATABASE bus_v1`)
	require.NoError(t, err)
	u, err := neturl.Parse(url)
	require.NoError(t, err)
	u.Path = "/bus_v1"
	conn, err := pgx.Connect(ctx, u.String())
	require.NoError(t, err)
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, `CREATE TABLE bus_topics (name text PRIMARY KEY); COMMENT ON TABLE bus_topics IS 'bus postgres schema v1'`)
	require.NoError(t, err)
	err = postgres.Migrate(ctx, conn)
	require.ErrorIs(t, err, postgres.ErrOldSchema)
	var n int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM pg_class WHERE relname = 'bus_messages'`).Scan(&n))
	assert.Zero(t, n, "nothing is created")
}

// testPublishTxThroughKills runs a publisher that
// commits and rolls back PublishTx transactions and a consumer, SIGKILLs
// both mid-run (the consumer inside a handler), and drains the topic with
// a fresh consumer: every committed message is delivered at least once,
// and no rolled-back one ever.
func testPublishTxThroughKills(t *testing.T, url string) {
	defer watchdog(t, 2*time.Minute)()
	topic, group := "tx.crash", "g"
	// The group exists before anything is published.
	b := openBus(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pre, err := b.Subscribe(ctx, topic, func(context.Context, *bus.Delivery) error { return errors.New("unused") }, bus.WithGroup(group))
	require.NoError(t, err)
	require.NoError(t, pre.Close(ctx))

	pub := startChild(t, "publisher", url, topic, group)
	cons := startChild(t, "consumer", url, topic, group)
	pub.waitFor(t, "COMMITTED", 100, 30*time.Second)
	cons.waitFor(t, "STUCK", 1, 30*time.Second)
	pub.kill(t)
	cons.kill(t)
	committed, rolledBack := pub.with("COMMITTED"), pub.with("ROLLEDBACK")
	require.NotEmpty(t, rolledBack, "the publisher rolled some transactions back")

	got := map[string]bool{}
	for _, id := range cons.with("GOT") {
		got[id] = true
	}
	var mu sync.Mutex
	_, err = b.Subscribe(ctx, topic, func(_ context.Context, d *bus.Delivery) error {
		mu.Lock()
		got[d.ID] = true
		mu.Unlock()
		return nil
	}, bus.WithGroup(group))
	require.NoError(t, err)
	missing := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, id := range committed {
			if !got[id] {
				n++
			}
		}
		return n
	}
	require.Eventually(t, func() bool { return missing() == 0 }, 30*time.Second, 10*time.Millisecond,
		"every committed message is delivered (the killed consumer's leases run out after %v)", childAckTimeout)
	mu.Lock()
	defer mu.Unlock()
	for _, id := range rolledBack {
		assert.False(t, got[id], "rolled-back %s was delivered", id)
	}
	t.Logf("committed=%d rolled back=%d delivered=%d lost=%d", len(committed), len(rolledBack), len(got), 0)
}
