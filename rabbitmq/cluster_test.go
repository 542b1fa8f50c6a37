package rabbitmq_test

import (
	"context"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/testkit/rabbittest"
	"github.com/eventbus-go/bus/rabbitmq"
)

// TestClusterNodeKill: on a 3-node cluster, a group's quorum queue is
// declared through node 0, which leads it; publisher and consumer run
// through node 1 while node 0 is killed (SIGKILL) mid-run. The other two
// members elect a leader, and every message Publish accepted, before,
// during and after the kill, is delivered: lost 0.
func TestClusterNodeKill(t *testing.T) {
	nodes := rabbittest.StartCluster(t, 3)
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
		msgs := make([]*bus.Message, 0, batch)
		for i := start; i < start+batch; i++ {
			msgs = append(msgs, &bus.Message{ID: "m-" + strconv.Itoa(i), Payload: []byte("x")})
		}
		var failingSince time.Time
		for {
			callCtx, callCancel := context.WithTimeout(ctx, 3*time.Second)
			err := pub.Publish(callCtx, topic, msgs...)
			callCancel()
			if err == nil {
				break
			}
			errs++
			if failingSince.IsZero() {
				failingSince = time.Now()
			}
			require.Less(t, time.Since(failingSince), 60*time.Second, "publishing recovers after the kill: %v", err)
			time.Sleep(20 * time.Millisecond) // the application's retry pacing, not synchronisation
		}
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
