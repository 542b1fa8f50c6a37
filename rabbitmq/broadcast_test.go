package rabbitmq_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/testkit/broadcasttest"
	"github.com/eventbus-go/bus/internal/testkit/crashtest"
	"github.com/eventbus-go/bus/internal/testkit/rabbittest"
	"github.com/eventbus-go/bus/observer"
	"github.com/eventbus-go/bus/rabbitmq"
)

// testBroadcastNeedsManagement: without a management URL the backend
// declares no Broadcast, and WithBroadcast is refused at Subscribe with
// an error that says to set the management parameter; with one it
// declares Broadcast.
func testBroadcastNeedsManagement(t *testing.T, node *rabbittest.Node) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	plain := openRabbit(ctx, t, node.URL())
	assert.False(t, plain.Capabilities().Broadcast)
	inspecting := openRabbit(ctx, t, node.InspectURL())
	assert.True(t, inspecting.Capabilities().Broadcast)

	b := bus.New(plain, bus.WithObserver(observer.Nop()))
	defer func() { _ = b.Close(ctx) }()
	_, err := b.Subscribe(ctx, "bcastplain", func(context.Context, *bus.Delivery) error { return nil }, bus.WithBroadcast())
	require.ErrorIs(t, err, bus.ErrUnsupported)
	assert.Contains(t, err.Error(), "set the management URL parameter")
}

// testBroadcastSweepDeletesFully: Groups lists only the group queues of
// a topic, not the backend's other queues of the same topic and group
// (members, lock, lock state, results); and a broadcast group whose
// process died is deleted by a live broadcast subscription's sweep with
// every queue the broker held for it.
func testBroadcastSweepDeletesFully(t *testing.T, node *rabbittest.Node) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const topic = "bcastfull"
	nop := func(context.Context, *bus.Delivery) error { return nil }

	dying := openRabbit(ctx, t, node.InspectURL())
	member := crashtest.New(dying)
	mb := bus.New(member, bus.WithObserver(observer.Nop()))
	t.Cleanup(func() { _ = mb.Close(context.Background()) })
	dead, err := mb.Subscribe(ctx, topic, nop, bus.WithBroadcast(), bus.WithBroadcastExpiry(time.Second))
	require.NoError(t, err)

	// Queues of the topic that are not groups.
	other := openRabbit(ctx, t, node.InspectURL())
	cfg := backend.SubscribeConfig{Group: "plain", AckTimeout: time.Minute, MaxInFlight: 1, Observer: observer.Nop()}
	sub, err := other.Subscribe(ctx, topic, cfg)
	require.NoError(t, err)
	require.NoError(t, sub.Close())
	held, _, err := other.LockGroup(ctx, topic, "plain", "holder", time.Minute)
	require.NoError(t, err)
	require.True(t, held)
	_, err = other.Heartbeat(ctx, topic, "plain", "m1", time.Minute)
	require.NoError(t, err)
	require.NoError(t, other.StoreResult(ctx, topic, "an-id", []byte("r"), time.Minute))

	gs, err := other.Groups(ctx, topic)
	require.NoError(t, err)
	var names []string
	for _, g := range gs {
		names = append(names, g.Name)
	}
	assert.Equal(t, []string{dead.Group(), "plain"}, names, "only the group queues are listed")

	mine := queuesNamed(ctx, t, node, dead.Group())
	require.NotEmpty(t, mine, "the broker holds the broadcast group's queues")
	t.Logf("the broadcast group's queues: %v", mine)

	member.Crash()
	died := time.Now()
	lb := bus.New(other, bus.WithObserver(observer.Nop()))
	t.Cleanup(func() { _ = lb.Close(context.Background()) })
	_, err = lb.Subscribe(ctx, topic, nop, bus.WithBroadcast(), bus.WithBroadcastExpiry(2*time.Second))
	require.NoError(t, err)
	var left []string
	require.Eventually(t, func() bool {
		left = queuesNamed(ctx, t, node, dead.Group())
		return len(left) == 0
	}, 60*time.Second, 100*time.Millisecond, "the dead broadcast group's queues are deleted: %v left", left)
	t.Logf("every queue of the dead broadcast group gone %v after it died", time.Since(died).Round(time.Millisecond))
}

// openRabbit opens the backend at raw, closed when t ends.
func openRabbit(ctx context.Context, t *testing.T, raw string) *rabbitmq.Backend {
	t.Helper()
	u, err := url.Parse(raw)
	require.NoError(t, err)
	b, err := rabbitmq.OpenURL(ctx, u)
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// queuesNamed lists the node's queues whose name holds s, through the
// management API.
func queuesNamed(ctx context.Context, t *testing.T, node *rabbittest.Node, s string) []string {
	t.Helper()
	qs, err := brokerQueues(ctx, node, s)
	require.NoError(t, err)
	var out []string
	for _, q := range qs {
		out = append(out, q.Name)
	}
	return out
}

// brokerQueue is what the management API reports of a queue.
type brokerQueue struct {
	Name      string `json:"name"`
	Messages  int64  `json:"messages"`
	Consumers int64  `json:"consumers"`
}

// brokerQueues lists the node's queues whose name holds s, through the
// management API (the broker's own view, not the backend's Inspector).
func brokerQueues(ctx context.Context, node *rabbittest.Node, s string) ([]brokerQueue, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, node.ManagementURL()+"/api/queues/%2F?columns=name,messages,consumers", nil)
	if err != nil {
		return nil, err
	}
	req.SetBasicAuth("guest", "guest")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /api/queues: %s", resp.Status)
	}
	var qs []brokerQueue
	if err := json.NewDecoder(resp.Body).Decode(&qs); err != nil {
		return nil, err
	}
	var out []brokerQueue
	for _, q := range qs {
		if strings.Contains(q.Name, s) {
			out = append(out, q)
		}
	}
	return out, nil
}

// testBroadcastKilledProcess: three processes subscribe in broadcast and
// one is SIGKILLed mid-stream; the live ones get every message, and
// within 1.5 times the expiry every queue of the dead one's group (its
// quorum queue, lock, lock state, release notes) is gone from the
// broker's queue list (the management API).
func testBroadcastKilledProcess(t *testing.T, node *rabbittest.Node) {
	broadcasttest.Run(t, broadcasttest.Config{
		URL:    node.InspectURL(),
		Topic:  "bcastkill",
		Expiry: 3 * time.Second,
		Leftovers: func(ctx context.Context, topic, group string) ([]string, error) {
			qs, err := brokerQueues(ctx, node, topic+"/"+group)
			var left []string
			for _, q := range qs {
				left = append(left, fmt.Sprintf("queue %s: %d messages, %d consumers", q.Name, q.Messages, q.Consumers))
			}
			return left, err
		},
	})
}
