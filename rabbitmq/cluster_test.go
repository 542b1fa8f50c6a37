package rabbitmq_test

import (
	"context"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/conformance"
	"github.com/eventbus-go/bus/internal/testkit/rabbittest"
	"github.com/eventbus-go/bus/rabbitmq"
)

// TestOnACluster runs the package's cluster tests on one private 3-node
// RabbitMQ cluster, one after another.
func TestOnACluster(t *testing.T) {
	nodes := rabbittest.StartCluster(t, 3)
	t.Run("GroupLockAcrossNodes", func(t *testing.T) { testGroupLockAcrossNodes(t, nodes) })
	t.Run("KeyOrder", func(t *testing.T) {
		// The key-order cases on a queue replicated over three nodes.
		conformance.Run(t, func(t testing.TB) backend.Backend {
			u, err := url.Parse(nodes[1].URL())
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			b, err := rabbitmq.OpenURL(ctx, u)
			require.NoError(t, err, "open the backend")
			return b
		}, conformance.WithOnly("GroupLock", "KeyOrderOneActiveMember", "KeyOrderAcrossClose", "KeyOrderAcrossLeaveAndJoin", "KeyOrderFencedMember", "KeyOrderLedgerThroughACrash"))
	})
	t.Run("NodeKill", func(t *testing.T) { testClusterNodeKill(t, nodes) })
}

// testGroupLockAcrossNodes: members on different nodes of a cluster
// share one group lock. Two holders never hold it at once; one released
// goes to the next without a takeover; one its holder stopped renewing
// is taken over within its ttl, and the old holder cannot renew it.
func testGroupLockAcrossNodes(t *testing.T, nodes []*rabbittest.Node) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	open := func(n *rabbittest.Node) *rabbitmq.Backend {
		u, err := url.Parse(n.URL())
		require.NoError(t, err)
		b, err := rabbitmq.OpenURL(ctx, u)
		require.NoError(t, err)
		t.Cleanup(func() { _ = b.Close() })
		return b
	}
	a, b := open(nodes[1]), open(nodes[2])
	const topic, group, ttl = "cluster.lock", "g", 2 * time.Second
	lock := func(be *rabbitmq.Backend, holder string) (bool, bool) {
		t.Helper()
		held, takeover, err := be.LockGroup(ctx, topic, group, holder, ttl)
		require.NoError(t, err, "lock for %s", holder)
		return held, takeover
	}
	held, takeover := lock(a, "a")
	require.True(t, held, "a free lock is taken through node 1")
	require.False(t, takeover, "a lock never held is no takeover")
	held, _ = lock(b, "b")
	require.False(t, held, "b, through node 2, cannot take a's lock")
	held, _ = lock(a, "a")
	require.True(t, held, "a renews")
	require.NoError(t, a.UnlockGroup(ctx, topic, group, "a"))
	held, takeover = lock(b, "b")
	require.True(t, held, "the released lock goes to b")
	require.False(t, takeover, "after a release: no takeover")

	// b stops renewing: a takes it over within the ttl.
	start := time.Now()
	poll := time.NewTicker(50 * time.Millisecond)
	defer poll.Stop()
	for held = false; !held && time.Since(start) < 3*ttl; <-poll.C {
		held, takeover = lock(a, "a")
	}
	took := time.Since(start)
	require.True(t, held, "the lock b stopped renewing is taken over")
	require.True(t, takeover, "a lock its holder let lapse is a takeover")
	require.Less(t, took, ttl+1500*time.Millisecond, "taken over within the ttl (and a poll and the lapse's round trips)")
	held, _ = lock(b, "b")
	require.False(t, held, "b cannot renew a lock taken over")
	t.Logf("lock taken over %v after its holder's last renewal (ttl %v)", took.Round(time.Millisecond), ttl)
}

// testClusterNodeKill: on a 3-node cluster, a group's quorum queue is
// declared through node 0, which leads it; publisher and consumer run
// through node 1 while node 0 is killed (SIGKILL) mid-run. The other two
// members elect a leader, and every message Publish accepted, before,
// during and after the kill, is delivered: lost 0.
func testClusterNodeKill(t *testing.T, nodes []*rabbittest.Node) {
	open := func(n *rabbittest.Node) *bus.Bus {
		u, err := url.Parse(n.URL())
		require.NoError(t, err)
		u.RawQuery = "heartbeat=2s&close_timeout=1s&write_timeout=3s"
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		be, err := rabbitmq.OpenURL(ctx, u)
		require.NoError(t, err)
		b := bus.New(be)
		t.Cleanup(func() { _ = b.Close(context.Background()) })
		return b
	}
	const topic, group, n, batch = "cluster.kill", "workers", 600, 25
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// Declare the group through node 0, which then leads its queue.
	first := open(nodes[0])
	sub0, err := first.Subscribe(ctx, topic, func(context.Context, *bus.Delivery) error { return nil }, bus.WithGroup(group))
	require.NoError(t, err)
	require.NoError(t, sub0.Close(ctx))

	pub, consumer := open(nodes[1]), open(nodes[1])
	var mu sync.Mutex
	got := map[string]int{}
	sub, err := consumer.Subscribe(ctx, topic, func(_ context.Context, d *bus.Delivery) error {
		mu.Lock()
		got[d.ID]++
		mu.Unlock()
		return nil
	}, bus.WithGroup(group), bus.WithAckTimeout(2*time.Second))
	require.NoError(t, err)
	defer sub.Close(context.Background())

	var killedAt time.Time
	errs := 0
	for start := 0; start < n; start += batch {
		errs += publishRetrying(ctx, t, pub, topic, numbered(start, start+batch), 3*time.Second, 60*time.Second, "publishing recovers after the kill")
		if start+batch == n/2 {
			nodes[0].Kill()
			killedAt = time.Now()
		}
	}
	resumedIn := time.Since(killedAt)
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == n
	}, 90*time.Second, 10*time.Millisecond, "every message Publish accepted is delivered (lost 0)")
	mu.Lock()
	dups := 0
	for _, c := range got {
		dups += c - 1
	}
	mu.Unlock()
	t.Logf("cluster of 3, leader node killed after %d messages: published %d (the rest in %v after the kill, %d publish errors retried), delivered %d distinct, %d again",
		n/2, n, resumedIn.Round(time.Millisecond), errs, n, dups)
}
