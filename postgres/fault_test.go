package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/testkit/faultproxy/faultsuite"
	"github.com/eventbus-go/bus/internal/testkit/pgtest"
	"github.com/eventbus-go/bus/observer"
)

// testFaultNetwork runs the fault suite (resets, blackholes, latency, a
// partition, close mid-run, a server killed with an immediate shutdown
// and started again) through TCP fault proxies in front of srv. Backends
// are opened from a postgres:// URL, as applications do.
func testFaultNetwork(t *testing.T, srv *pgtest.Server) {
	faultsuite.Run(t, faultsuite.Harness{
		Target:      srv.Addr(),
		StopServer:  srv.Kill,
		StartServer: srv.Restart,
		Open:        openThrough(srv),
	})
}

// testFaultBrokerPause freezes srv (the postmaster and every backend,
// SIGSTOP) under load. BoundsEveryCall: Publish, Subscribe and the Closes
// with acks pending return by their ctx while it is frozen, and a new
// member gets every message after it runs again. FourPartitions: two
// members of a key-ordered group sharing four partitions consume while
// it is frozen five times (400 ms, once 1.2 s), so statements get their
// replies after the client gave up on them: nothing lost, out of order or
// waiting for its lease. (The one- and two-member pause cases pass too;
// they are left out to keep the package's run short.)
func testFaultBrokerPause(t *testing.T, srv *pgtest.Server) {
	h := faultsuite.Harness{
		Target:       srv.Addr(),
		PauseServer:  srv.Pause,
		ResumeServer: srv.Resume,
		PauseCases:   []string{"FourPartitions"},
		Open:         openThrough(srv),
	}
	t.Run("BoundsEveryCall", func(t *testing.T) { faultsuite.RunPauseBounds(t, h) })
	faultsuite.RunPause(t, h)
}

// openThrough returns a faultsuite Open that opens a backend on srv's
// database from a postgres:// URL.
func openThrough(srv *pgtest.Server) func(t testing.TB, addr string) backend.Backend {
	return faultsuite.OpenURL(srv.URL(), "", openURL)
}

// testTerminatedConnections publishes 600 messages in batches of 20
// while a consumer works, and at 140, 300 and 440 terminates every other
// connection to the database (pg_terminate_backend): the pools, the
// listener and the fetches in flight all lose their connections. Every
// message whose Publish returned nil is delivered; the others are
// published again, as a caller retries.
func testTerminatedConnections(t *testing.T, rawURL string) {
	defer watchdog(t, 2*time.Minute)()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, err := pgx.Connect(ctx, rawURL)
	require.NoError(t, err)
	defer admin.Close(context.Background())
	// The errors the terminations cause are expected; the ledger is the
	// test.
	pub, cons := openBus(t, rawURL, bus.WithObserver(observer.Nop())), openBus(t, rawURL, bus.WithObserver(observer.Nop()))
	topic := "fault.terminated"
	var mu sync.Mutex
	got := map[string]int{}
	_, err = cons.Subscribe(ctx, topic, func(_ context.Context, d *bus.Delivery) error {
		mu.Lock()
		got[d.ID]++
		mu.Unlock()
		return nil
	}, bus.WithGroup("g"), bus.WithAckTimeout(time.Second), bus.WithStartFrom(bus.StartOldest))
	require.NoError(t, err)
	killed := 0
	for i := 0; i < 600; i += 20 {
		if i == 140 || i == 300 || i == 440 {
			var n int
			require.NoError(t, admin.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
WHERE pid <> pg_backend_pid() AND datname = current_database() AND backend_type = 'client backend'`).Scan(&n))
			killed += n
		}
		batch := make([]*bus.Message, 20)
		for j := range batch {
			batch[j] = &bus.Message{ID: fmt.Sprintf("t-%d", i+j), Payload: []byte("x")}
		}
		// A Publish that failed may or may not have committed; the
		// caller retries with the same IDs, which the dedup window
		// stores once.
		require.Eventually(t, func() bool {
			pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
			defer pcancel()
			return pub.Publish(pctx, topic, batch...) == nil
		}, 30*time.Second, 10*time.Millisecond, "publish batch %d after the terminations", i/20)
	}
	require.Positive(t, killed, "the terminations hit live connections")
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == 600
	}, 30*time.Second, 10*time.Millisecond, "every message is delivered after its connections were terminated")
	mu.Lock()
	defer mu.Unlock()
	dup := 0
	for _, n := range got {
		dup += n - 1
	}
	t.Logf("terminated connections: %d; delivered %d unique, %d duplicate, lost 0", killed, len(got), dup)
}
