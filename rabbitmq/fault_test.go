package rabbitmq_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/testkit/faultproxy"
	"github.com/eventbus-go/bus/internal/testkit/faultproxy/faultsuite"
	"github.com/eventbus-go/bus/internal/testkit/rabbittest"
	"github.com/eventbus-go/bus/observer"
	"github.com/eventbus-go/bus/rabbitmq"
)

// testFaultNetwork runs the fault suite through proxies to node: resets,
// blackholes, latency, a partition mid-batch and a close mid-run.
func testFaultNetwork(t *testing.T, node *rabbittest.Node) {
	faultsuite.Run(t, faultsuite.Harness{
		Target:      node.Addr(),
		StopServer:  killSaved(t, node),
		StartServer: node.Restart,
		Open:        openThrough(node),
		Skip: map[string]string{
			// RabbitMQ gives a delivery to another consumer only when
			// its holder nacks it or its channel closes. The member
			// cut off here acks its deliveries as the blackhole starts;
			// the acks wait in the link and reach the broker when it
			// heals, 1.5 s later, so the group never gets them again and
			// the case's "redelivered > 0" cannot hold. The broker
			// notices a dead link after two missed heartbeats (at least
			// 2 s, heartbeats being whole seconds), past the blackhole.
			"BlackholeLongerThanAckTimeout": "RabbitMQ moves a delivery only when its holder nacks it or its connection dies (two missed heartbeats, >= 2 s); the acks sent into the 1.5 s blackhole arrive after it",
		},
	})
}

// testFaultNodePause freezes node (SIGSTOP) under load: every call
// returns by its ctx while it is frozen, and a one-member group loses
// nothing through five pauses.
func testFaultNodePause(t *testing.T, node *rabbittest.Node) {
	h := faultsuite.Harness{
		Target:       node.Addr(),
		PauseServer:  node.Pause,
		ResumeServer: node.Resume,
		PauseCases:   []string{"OneMember"},
		Open:         openThrough(node),
	}
	t.Run("BoundsEveryCall", func(t *testing.T) { faultsuite.RunPauseBounds(t, h) })
	faultsuite.RunPause(t, h)
}

// openThrough returns a faultsuite Open that opens a backend on node
// from an amqp:// URL, with a short heartbeat so that a dead connection
// is noticed within seconds.
func openThrough(node *rabbittest.Node) func(t testing.TB, addr string) backend.Backend {
	return faultsuite.OpenURL(node.URL(), faultQuery, rabbitmq.OpenURL)
}

// faultQuery is the URL query of the fault cases' backends.
const faultQuery = "heartbeat=2s&close_timeout=1s&write_timeout=3s"

// throughProxy starts a fault proxy to node and opens a backend through
// it with the URL query query; both close when t ends, the backend first.
func throughProxy(t *testing.T, node *rabbittest.Node, query string) (*faultproxy.Proxy, backend.Backend) {
	t.Helper()
	p, err := faultproxy.New(node.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	be := faultsuite.OpenURL(node.URL(), query, rabbitmq.OpenURL)(t, p.Addr())
	t.Cleanup(func() { _ = be.Close() })
	return p, be
}

// killSaved returns a StopServer that kills node once it saved the Raft
// state of its quorum queues: the fault cases create their queues a
// moment before the kill, and a queue whose state was not on disk comes
// back empty and without a leader (see rabbittest.Node.SaveRaftMeta).
func killSaved(t *testing.T, node *rabbittest.Node) func() {
	return func() {
		require.NoError(t, node.SaveRaftMeta())
		node.Kill()
	}
}

// testFaultCloseConnection has the broker close every client connection
// (rabbitmqctl's close_connection, for all of them in one call) three
// times while 600 messages are published in batches of 25 and consumed:
// the buses reconnect by themselves and every message Publish accepted is
// delivered.
func testFaultCloseConnection(t *testing.T, node *rabbittest.Node) {
	open := openThrough(node)
	pub := bus.New(open(t, node.Addr()))
	defer pub.Close(context.Background())
	consumer := bus.New(open(t, node.Addr()))
	defer consumer.Close(context.Background())

	const topic, n, batch = "fault.closeconnection", 600, 25
	var mu sync.Mutex
	got := map[string]int{}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sub, err := consumer.Subscribe(ctx, topic, func(_ context.Context, d *bus.Delivery) error {
		mu.Lock()
		got[d.ID]++
		mu.Unlock()
		return nil
	}, bus.WithGroup("workers"), bus.WithAckTimeout(time.Second))
	require.NoError(t, err)
	defer sub.Close(context.Background())

	closes := make(chan struct{}, 3)
	var closed []string
	closerDone := make(chan struct{})
	go func() {
		defer close(closerDone)
		for range closes {
			out, err := node.Ctl("eval", `length([rabbit_networking:close_connection(P, "bus fault test") || P <- rabbit_networking:connections()]).`)
			if err != nil {
				t.Errorf("close the connections: %v: %s", err, out)
			}
			closed = append(closed, strings.TrimSpace(out))
		}
	}()
	published := 0
	for start := 0; start < n; start += batch {
		publishRetrying(ctx, t, pub, topic, numbered(start, start+batch), 2*time.Second, 30*time.Second, "publishing recovers")
		published += batch
		if published == 150 || published == 300 || published == 450 {
			closes <- struct{}{}
		}
	}
	close(closes)
	<-closerDone
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == n
	}, 60*time.Second, 10*time.Millisecond, "every message Publish accepted is delivered (lost 0)")
	dups := 0
	mu.Lock()
	for _, c := range got {
		dups += c - 1
	}
	mu.Unlock()
	t.Logf("connections closed by each round: %v; published %d, delivered %d distinct, %d again", closed, n, n, dups)
	for i, c := range closed {
		assert.NotEqual(t, "0", c, "round %d closed live connections", i+1)
	}
}

// testSubscriptionCloseBoundedOnBlackhole: over a blackholed link, with
// deliveries unsettled, Subscription.Close returns within about its one
// close_timeout (1 s), not one per step.
func testSubscriptionCloseBoundedOnBlackhole(t *testing.T, node *rabbittest.Node) {
	p, be := throughProxy(t, node, faultQuery)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sub, err := be.Subscribe(ctx, "close.blackhole", backend.SubscribeConfig{Group: "g", AckTimeout: time.Minute, MaxInFlight: 4, MaxDeliveries: 5, Observer: observer.Nop()})
	require.NoError(t, err)
	msgs := make([]*backend.Message, 4)
	for i := range msgs {
		msgs[i] = &backend.Message{ID: "m" + strconv.Itoa(i), Payload: []byte("x"), PublishedAt: time.Now()}
	}
	require.NoError(t, be.Publish(ctx, "close.blackhole", msgs))
	var got []*backend.Message
	require.Eventually(t, func() bool {
		m, err := sub.Receive(ctx, 4)
		require.NoError(t, err)
		got = append(got, m...)
		return len(got) > 0
	}, 20*time.Second, time.Millisecond, "a delivery arrives")

	p.Blackhole(true)
	defer p.Blackhole(false)
	start := time.Now()
	require.NoError(t, sub.Close())
	took := time.Since(start)
	t.Logf("Subscription.Close over a blackhole with %d unsettled: %v (close_timeout 1s)", len(got), took.Round(time.Millisecond))
	assert.Less(t, took, 1500*time.Millisecond, "one close_timeout for the whole Close")
}

// testCancelledChannelOpenKeepsTheConnection: a Receive whose ctx ends
// while its channel opens (the broker has not answered yet) returns by
// its ctx and leaves the connection, which another subscription's
// channel shares, alone: no connection is dialed again, and the other
// subscription's ack takes, so its group never sees the message again.
func testCancelledChannelOpenKeepsTheConnection(t *testing.T, node *rabbittest.Node) {
	p, be := throughProxy(t, node, faultQuery)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const topic = "cancel.open"
	subscribe := func(group string) backend.Subscription {
		sub, err := be.Subscribe(ctx, topic, backend.SubscribeConfig{Group: group, AckTimeout: time.Minute, MaxInFlight: 4, MaxDeliveries: 5, Observer: observer.Nop()})
		require.NoError(t, err)
		return sub
	}
	receive := func(sub backend.Subscription, within time.Duration) []*backend.Message {
		var got []*backend.Message
		deadline := time.Now().Add(within)
		for len(got) == 0 && time.Now().Before(deadline) {
			m, err := sub.Receive(ctx, 4)
			require.NoError(t, err)
			got = append(got, m...)
		}
		return got
	}
	a, b := subscribe("a"), subscribe("b")
	require.NoError(t, be.Publish(ctx, topic, []*backend.Message{{ID: "m", Payload: []byte("x"), PublishedAt: time.Now()}}))
	held := receive(a, 20*time.Second)
	require.Len(t, held, 1, "group a's member holds the message")
	dialed := p.Accepted()

	// b opens its channel while the broker's answers are held back.
	p.Blackhole(true)
	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	start := time.Now()
	_, err := b.Receive(short, 4)
	cancelShort()
	p.Blackhole(false)
	require.ErrorIs(t, err, context.DeadlineExceeded, "the Receive ends with its ctx")
	assert.Less(t, time.Since(start), time.Second, "the Receive returns by its ctx")

	require.Len(t, receive(b, 20*time.Second), 1, "group b's member receives the message on its next Receive")
	require.NoError(t, a.Ack(ctx, []backend.AckID{held[0].AckID}))
	require.NoError(t, a.Close())
	again := subscribe("a")
	defer again.Close()
	assert.Empty(t, receive(again, 2*time.Second), "group a's ack took: the message does not come back")
	assert.Equal(t, dialed, p.Accepted(), "no connection was dialed again")
}

// testAbandonedCallsKeepTheConnection: callers whose ctx ended before
// their method went out close its channel at once, a hundred times over;
// the method is sent before the channel's close or not at all, so the
// broker never reads a frame on a channel it closed, which would end
// the connection (504 "expected 'channel.open'") and what every other
// channel on it holds.
func testAbandonedCallsKeepTheConnection(t *testing.T, node *rabbittest.Node) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b := openRabbit(ctx, t, node.URL())
	sub, err := b.Subscribe(ctx, "abandon.calls", backend.SubscribeConfig{Group: "g", AckTimeout: time.Minute, MaxInFlight: 1, MaxDeliveries: 5, Observer: observer.Nop()})
	require.NoError(t, err)
	defer sub.Close()
	before, after, err := rabbitmq.AbandonGets(b, rabbitmq.QueueName(b, "abandon.calls", "g"), 100)
	require.NoError(t, err, "the connection serves a channel after the abandoned calls")
	assert.Same(t, before, after, "the publishing connection is the one from before")
}

// testUnansweredChannelOpenBreaksTheConnection: a channel open that the
// broker does not answer within dial_timeout (1 s here; the heartbeat of
// 5 s would take 15 s) breaks the connection, so that the next call
// dials a new one instead of waiting on a dead network.
func testUnansweredChannelOpenBreaksTheConnection(t *testing.T, node *rabbittest.Node) {
	p, be := throughProxy(t, node, "heartbeat=5s&close_timeout=1s&write_timeout=3s&dial_timeout=1s")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const topic = "dead.open"
	cfg := backend.SubscribeConfig{AckTimeout: time.Minute, MaxInFlight: 4, MaxDeliveries: 5, Observer: observer.Nop()}
	cfg.Group = "a"
	a, err := be.Subscribe(ctx, topic, cfg)
	require.NoError(t, err)
	defer a.Close()
	cfg.Group = "b"
	b, err := be.Subscribe(ctx, topic, cfg)
	require.NoError(t, err)
	defer b.Close()
	require.NoError(t, be.Publish(ctx, topic, []*backend.Message{{ID: "m", Payload: []byte("x"), PublishedAt: time.Now()}}))
	require.Eventually(t, func() bool {
		m, err := a.Receive(ctx, 4)
		require.NoError(t, err)
		return len(m) > 0
	}, 20*time.Second, time.Millisecond, "the consume connection is up")
	dialed := p.Accepted()

	p.Blackhole(true)
	defer p.Blackhole(false)
	start := time.Now()
	require.Eventually(t, func() bool {
		short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancelShort()
		_, err := b.Receive(short, 4)
		require.Error(t, err, "nothing answers over the blackhole")
		return p.Accepted() > dialed
	}, 10*time.Second, 10*time.Millisecond, "a new connection is dialed once the channel open went unanswered")
	took := time.Since(start)
	t.Logf("the connection broke and was dialed again %v after the first unanswered channel open", took.Round(time.Millisecond))
	assert.Less(t, took, 5*time.Second, "dial_timeout (1 s), not the heartbeat (15 s), ends the wait")
}

// testUnconfirmedPublishSaysMaybeStored: a batch whose channel the broker
// closes before it confirms (here a publish to a topic exchange that was
// deleted: 404 closes the channel) is listed as failed, each message with
// an error that says it may be stored and should be published again, and
// the next Publish goes through.
func testUnconfirmedPublishSaysMaybeStored(t *testing.T, node *rabbittest.Node) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := bus.New(openRabbit(ctx, t, node.URL()))
	const topic = "unconfirmed.publish"
	batch := func(tag string) []*bus.Message {
		return []*bus.Message{{ID: tag + "1", Payload: []byte("x")}, {ID: tag + "2", Payload: []byte("y")}, {ID: tag + "3", Payload: []byte("z")}}
	}
	require.NoError(t, b.Publish(ctx, topic, batch("before")...), "the first Publish declares the topic's exchange")
	raw, err := amqp.Dial(node.URL())
	require.NoError(t, err)
	defer raw.Close()
	ch, err := raw.Channel()
	require.NoError(t, err)
	require.NoError(t, ch.ExchangeDelete("bus.t."+topic, false, false), "take the topic's exchange away")
	require.NoError(t, ch.Close())

	err = b.Publish(ctx, topic, batch("during")...)
	var pe *bus.PublishError
	require.ErrorAs(t, err, &pe, "a batch the broker did not confirm fails")
	require.False(t, pe.Rejected)
	require.Len(t, pe.Failed, 3, "every message of the batch is listed")
	for i, f := range pe.Failed {
		assert.Equal(t, i, f.Index)
		assert.ErrorContains(t, f.Err, "may be stored or not; publish it again", "message %s", f.ID)
	}
	require.NoError(t, b.Publish(ctx, topic, batch("during")...), "the next Publish declares the exchange again")
}
