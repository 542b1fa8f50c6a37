package outbox_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/testkit/pgtest"
	"github.com/eventbus-go/bus/observer"
	"github.com/eventbus-go/bus/outbox"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// watchdog fails the test with a message if it is still running after d.
func watchdog(t *testing.T, d time.Duration) func() {
	t.Helper()
	name := t.Name()
	timer := time.AfterFunc(d, func() {
		panic(fmt.Sprintf("watchdog: %s did not finish within %v", name, d))
	})
	return func() { timer.Stop() }
}

// startDB starts a private server, migrates it and returns its URL and a
// connection closed when the test ends.
func startDB(t *testing.T) (*pgtest.Server, *pgx.Conn) {
	t.Helper()
	srv := pgtest.Start(t)
	return srv, connect(t, srv.URL(), true)
}

func connect(t *testing.T, url string, migrate bool) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	if migrate {
		require.NoError(t, outbox.Migrate(ctx, conn), "migrate")
		require.NoError(t, outbox.Migrate(ctx, conn), "a second migrate does nothing")
	}
	return conn
}

// write commits msgs for topic in one transaction (rolled back when
// rollback) and returns the messages, their IDs assigned.
func write(t *testing.T, conn *pgx.Conn, topic string, rollback bool, msgs ...*bus.Message) []*bus.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, outbox.Publish(ctx, tx, topic, msgs...))
	if rollback {
		require.NoError(t, tx.Rollback(ctx))
	} else {
		require.NoError(t, tx.Commit(ctx))
	}
	return msgs
}

// keyed makes n messages spread over keys k0..k(keys-1), with a payload
// naming the key and the message's rank within it.
func keyed(n, keys int, prefix string) []*bus.Message {
	msgs := make([]*bus.Message, n)
	for i := range msgs {
		k := fmt.Sprintf("k%d", i%keys)
		msgs[i] = &bus.Message{Key: k, Payload: fmt.Appendf(nil, "%s/%s/%06d", prefix, k, i/keys)}
	}
	return msgs
}

// collector records what a subscription received.
type collector struct {
	mu    sync.Mutex
	ids   map[string]int      // deliveries per ID
	byKey map[string][]string // payloads in order of handling
	n     int
}

func collect(t *testing.T, b *bus.Bus, topic string) *collector {
	t.Helper()
	c := &collector{ids: map[string]int{}, byKey: map[string][]string{}}
	ctx, cancel := context.WithCancel(context.Background())
	sub, err := b.Subscribe(ctx, topic, func(_ context.Context, d *bus.Delivery) error {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.ids[d.Message.ID]++
		c.byKey[d.Message.Key] = append(c.byKey[d.Message.Key], string(d.Message.Payload))
		c.n++
		return nil
	}, bus.WithGroup("check"), bus.WithMaxInFlight(1), bus.WithStartFrom(bus.StartOldest))
	require.NoError(t, err)
	t.Cleanup(func() {
		cancel()
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer ccancel()
		_ = sub.Close(cctx)
	})
	return c
}

func (c *collector) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// requireExactly checks that c received each of want exactly once, and
// each key's messages in the order written.
func (c *collector) requireExactly(t *testing.T, want []*bus.Message) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	require.Len(t, c.ids, len(want), "every message arrives, and nothing else")
	wantByKey := map[string][]string{}
	for _, m := range want {
		require.Equal(t, 1, c.ids[m.ID], "message %s arrives exactly once", m.ID)
		wantByKey[m.Key] = append(wantByKey[m.Key], string(m.Payload))
	}
	for k, payloads := range wantByKey {
		require.Equal(t, payloads, c.byKey[k], "key %q arrives in the order written", k)
	}
}

// pending counts the rows waiting in the outbox.
func pending(t *testing.T, conn *pgx.Conn) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := outbox.ReadStats(ctx, conn)
	require.NoError(t, err)
	return st.Pending
}

func closeRelay(t *testing.T, r *outbox.Relay) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, r.Close(ctx), "the relay closes within its ctx")
}

// memBus opens a mem:// bus without an observer's output, closed when the
// test ends (after the relays and subscriptions the test closes).
func memBus(t *testing.T) *bus.Bus {
	t.Helper()
	b, err := bus.Open(context.Background(), "mem://", bus.WithObserver(observer.Nop()))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, b.Close(context.Background()), "close the bus") })
	return b
}
