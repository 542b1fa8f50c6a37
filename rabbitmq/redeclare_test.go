package rabbitmq_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/testkit/faultproxy"
	"github.com/eventbus-go/bus/internal/testkit/faultproxy/faultsuite"
	"github.com/eventbus-go/bus/internal/testkit/rabbittest"
	"github.com/eventbus-go/bus/rabbitmq"
)

// testFaultLostDeclarations takes a group's binding away behind the
// backends' backs, or its topic's exchange (and the binding with it)
// while a publisher runs, as a node that comes back from a crash may
// have lost them, and drops every connection of the publishing and the
// consuming backend: every message Publish accepts once the member
// consumes again is delivered, and the first Publish to a topic whose
// exchange is gone succeeds (see the package doc's Recovery).
func testFaultLostDeclarations(t *testing.T, node *rabbittest.Node) {
	tests := []struct {
		name string
		lose func(ch *amqp.Channel, ex, q string) error
	}{
		{"Binding", func(ch *amqp.Channel, ex, q string) error { return ch.QueueUnbind(q, "", ex, nil) }},
		{"Exchange", func(ch *amqp.Channel, ex, _ string) error { return ch.ExchangeDelete(ex, false, false) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { testLostDeclaration(t, node, "fault.lost"+tt.name, tt.lose) })
	}
}

func testLostDeclaration(t *testing.T, node *rabbittest.Node, topic string, lose func(ch *amqp.Channel, ex, q string) error) {
	p, err := faultproxy.New(node.Addr())
	require.NoError(t, err)
	defer p.Close()
	open := faultsuite.OpenURL(node.URL(), "heartbeat=2s&close_timeout=1s&write_timeout=3s&dial_timeout=2s", rabbitmq.OpenURL)
	pub := bus.New(open(t, p.Addr()))
	defer pub.Close(context.Background())
	consumer := bus.New(open(t, p.Addr()))
	defer consumer.Close(context.Background())
	raw, err := amqp.Dial(node.URL()) // past the proxy: the broker's view
	require.NoError(t, err)
	defer raw.Close()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var mu sync.Mutex
	got := map[string]bool{}
	sub, err := consumer.Subscribe(ctx, topic, func(_ context.Context, d *bus.Delivery) error {
		mu.Lock()
		got[d.ID] = true
		mu.Unlock()
		return nil
	}, bus.WithGroup("g"))
	require.NoError(t, err)
	defer sub.Close(context.Background())
	missing := func(ids []string) []string {
		mu.Lock()
		defer mu.Unlock()
		var out []string
		for _, id := range ids {
			if !got[id] {
				out = append(out, id)
			}
		}
		return out
	}
	require.NoError(t, pub.Publish(ctx, topic, &bus.Message{ID: "before", Payload: []byte("x")}))
	require.Eventually(t, func() bool { return len(missing([]string{"before"})) == 0 }, 20*time.Second, 5*time.Millisecond,
		"the member receives before the fault")

	// A topic without groups, whose exchange the node loses too: no
	// member declares it again.
	side := topic + ".side"
	require.NoError(t, pub.Publish(ctx, side, &bus.Message{ID: "side-before", Payload: []byte("x")}))

	ex, q := "bus.t."+topic, "bus.q."+topic+"/g"
	ch, err := raw.Channel()
	require.NoError(t, err)
	require.NoError(t, lose(ch, ex, q), "take the declaration away")
	require.NoError(t, ch.ExchangeDelete("bus.t."+side, false, false), "take the side topic's exchange away")
	require.NoError(t, ch.Close())
	// Publishing goes on: a batch the broker refuses for want of its
	// exchange makes the next declare it again.
	publishRetrying(ctx, t, pub, topic, []*bus.Message{{ID: "during", Payload: []byte("x")}}, 2*time.Second, 20*time.Second, "publishing recovers")

	// Every connection of both backends drops; the proxy holds their
	// new ones until the broker has dropped the member's consumer, so
	// that a consumer on the queue after it is the member's new one.
	p.Blackhole(true)
	dropped := p.Reset()
	require.Eventually(t, func() bool { return consumers(t, raw, q) == 0 }, 20*time.Second, 10*time.Millisecond,
		"the broker drops the member's consumer with its connection")
	p.Blackhole(false)
	require.Eventually(t, func() bool { return consumers(t, raw, q) == 1 }, 30*time.Second, 10*time.Millisecond,
		"the member consumes again")

	require.NoError(t, pub.Publish(ctx, side, &bus.Message{ID: "side-after", Payload: []byte("x")}),
		"the first Publish on the new connection declares its topic's exchange again")

	const n, batch = 60, 20
	var ids []string
	for start := 0; start < n; start += batch {
		msgs := numbered(start, start+batch)
		publishRetrying(ctx, t, pub, topic, msgs, 2*time.Second, 20*time.Second, "publishing recovers")
		for _, m := range msgs {
			ids = append(ids, m.ID)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for len(missing(ids)) > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // polling the handler's record until the deadline
	}
	lost := missing(ids)
	t.Logf("connections dropped: %d; published %d after the member consumed again, lost %d", dropped, len(ids), len(lost))
	require.Empty(t, lost, "every message Publish accepted after the member consumed again is delivered (lost 0)")
}

// numbered returns the messages m-<start> to m-<end-1>.
func numbered(start, end int) []*bus.Message {
	msgs := make([]*bus.Message, 0, end-start)
	for i := start; i < end; i++ {
		msgs = append(msgs, &bus.Message{ID: "m-" + strconv.Itoa(i), Payload: []byte("x")})
	}
	return msgs
}

// publishRetrying publishes msgs to topic as an application does: each
// call bounded by call, again 20 ms after a failure, until Publish
// returns nil. It fails the test, naming what, when publishing has
// failed for limit, and returns how many calls failed.
func publishRetrying(ctx context.Context, t *testing.T, pub *bus.Bus, topic string, msgs []*bus.Message, call, limit time.Duration, what string) int {
	t.Helper()
	failed := 0
	var failingSince time.Time
	for {
		callCtx, cancel := context.WithTimeout(ctx, call)
		err := pub.Publish(callCtx, topic, msgs...)
		cancel()
		if err == nil {
			return failed
		}
		failed++
		if failingSince.IsZero() {
			failingSince = time.Now()
		}
		require.Less(t, time.Since(failingSince), limit, "%s: %v", what, err)
		time.Sleep(20 * time.Millisecond) // the application's retry pacing, not synchronisation
	}
}

// consumers returns the consumer count of queue q, as the broker reports
// it to a passive queue.declare.
func consumers(t *testing.T, conn *amqp.Connection, q string) int {
	t.Helper()
	ch, err := conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	st, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
	require.NoError(t, err, "the group's queue exists")
	return st.Consumers
}
