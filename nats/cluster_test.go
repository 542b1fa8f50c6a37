package nats_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	bus "github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/testkit/natstest"
	busnats "github.com/eventbus-go/bus/nats"
)

// TestClusterNodeKilledMidRunLosesNothing publishes and consumes through
// a 3-node cluster with R3 streams and kills the stream's leader in the
// middle: the cluster elects another, the client fails over, and every
// message whose Publish returned nil is delivered and acked.
func TestClusterNodeKilledMidRunLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a cluster takes seconds to form and to fail over")
	}
	c, o, be, b := clusterBus(t)
	l := newLedger()
	const topic, n = "killed", 600
	_, err := b.Subscribe(context.Background(), topic, recordingHandler(l), bus.WithGroup("g"),
		bus.WithStartFrom(backend.StartOldest), bus.WithAckTimeout(faultAckTimeout))
	require.NoError(t, err)

	halfway := make(chan struct{})
	done := make(chan struct{})
	var killed atomic.Bool
	var afterKill atomic.Int64
	go func() {
		defer close(done)
		for i := range n {
			if i == n/3 {
				close(halfway)
			}
			m := &bus.Message{Payload: fmt.Appendf(nil, "m-%d", i)}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := b.Publish(ctx, topic, m)
			cancel()
			l.publish(m.ID, err)
			if err == nil && killed.Load() {
				afterKill.Add(1)
			}
		}
	}()
	select {
	case <-halfway:
	case <-time.After(time.Minute):
		t.Fatal("a third of the messages were not published within a minute")
	}
	leader := streamLeader(t, be, o.StreamPrefix+"_"+topic)
	var victim *natstest.Server
	for i, s := range c.Servers {
		if fmt.Sprintf("n%d", i) == leader {
			victim = s
		}
	}
	require.NotNil(t, victim, "stream leader %q is one of the cluster's servers", leader)
	victim.Shutdown()
	killed.Store(true)
	t.Logf("killed the stream leader %s", leader)

	s := settledAfter(t, done, 3*time.Minute, l)
	assert.Positive(t, afterKill.Load(), "the cluster kept accepting messages after its stream leader died")
	assert.GreaterOrEqual(t, s.Published, n/3, "at least the messages before the kill were accepted")
	assert.Zero(t, s.Lost, "lost: published and never acked")
	victim.Restart() // back in the cluster, so the cleanup can reach any seed
}

// streamLeader returns the server name of the stream's leader.
func streamLeader(t *testing.T, be *busnats.Backend, stream string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st := streamOf(ctx, t, be, stream)
	info, err := st.Info(ctx)
	require.NoError(t, err)
	require.NotNil(t, info.Cluster, "the stream is clustered")
	require.Equal(t, 3, info.Config.Replicas, "R3 stream")
	return strings.TrimSpace(info.Cluster.Leader)
}

// TestClusterPartitionCountRightAfterTheBucketIsMade: the first Publish
// or Subscribe of a topic reads its partition count from a key-value
// bucket that the backend makes on first use; on a cluster the bucket's
// R3 stream answers "no responders" until its leader is elected and its
// replicas caught up. Each round is a backend with a bucket of its own,
// which records and reads a count at once.
func TestClusterPartitionCountRightAfterTheBucketIsMade(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a cluster takes seconds to form")
	}
	c := natstest.StartCluster(t, 3)
	for round := range 5 {
		be := connect(t, c.URL(), isolated(t, c.URL(), busnats.Options{Replicas: 3}))
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		topic := fmt.Sprint("orders", round)
		n, err := be.Partitions(ctx, topic, 4)
		require.NoError(t, err, "round %d: record the count in a bucket just made", round)
		assert.Equal(t, 4, n)
		n, err = be.Partitions(ctx, topic, 1)
		require.NoError(t, err, "round %d: read it back", round)
		assert.Equal(t, 4, n, "round %d: the recorded count, from the leader", round)
		ms, err := be.Heartbeat(ctx, topic, "g", "m1", time.Minute)
		require.NoError(t, err)
		assert.Equal(t, []string{"m1"}, ms, "round %d", round)
		cancel()
		require.NoError(t, be.Close())
	}
}

// TestClusterReceiveWhileTheConsumerElects: a replicated consumer
// answers pull requests with "no responders" while it elects a leader:
// right after it is made, and whenever its leader steps down. A Receive
// waits that out and returns the message the topic holds, without an
// error. Each round is a new topic and group whose consumer's leader
// steps down after the first message.
func TestClusterReceiveWhileTheConsumerElects(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a cluster takes seconds to form")
	}
	c := natstest.StartCluster(t, 3)
	o := isolated(t, c.URL(), busnats.Options{Replicas: 3})
	be := connect(t, c.URL(), o)
	defer be.Close()
	for round := range 10 {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		topic := fmt.Sprint("elects", round)
		sub, err := be.Subscribe(ctx, topic, backend.SubscribeConfig{Group: "g", AckTimeout: time.Minute, MaxInFlight: 8, StartFrom: backend.StartOldest})
		require.NoError(t, err, "round %d", round)
		receiveOne := func(what string, i int) {
			require.Eventually(t, func() bool {
				err := be.Publish(ctx, topic, []*backend.Message{{ID: fmt.Sprint("m", round, "-", i), Payload: []byte("x")}})
				return err == nil
			}, 10*time.Second, 10*time.Millisecond, "round %d: the topic's stream takes a message", round)
			got := 0
			for got == 0 && ctx.Err() == nil {
				msgs, err := sub.Receive(ctx, 8)
				require.NoError(t, err, "round %d: a Receive %s", round, what)
				got = len(msgs)
				if got > 0 {
					require.NoError(t, sub.Ack(ctx, []backend.AckID{msgs[0].AckID}))
				}
			}
			require.Equal(t, 1, got, "round %d: the message %s", round, what)
		}
		receiveOne("of a new consumer", 0)
		stream := o.StreamPrefix + "_" + topic
		stepDown(ctx, t, be, stream, consumerName(t, be, stream))
		receiveOne("right after its leader stepped down", 1)
		require.NoError(t, sub.Close())
		cancel()
	}
}

// clusterBus starts a 3-node cluster and returns its URL's options
// (R3 streams), a backend on it, and a bus on the backend, which the
// test's cleanup closes.
func clusterBus(t *testing.T) (*natstest.Cluster, busnats.Options, *busnats.Backend, *bus.Bus) {
	t.Helper()
	c := natstest.StartCluster(t, 3)
	o := isolated(t, c.URL(), busnats.Options{Replicas: 3})
	be := connect(t, c.URL(), o)
	b := bus.New(be)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		assert.NoError(t, b.Close(ctx), "close the bus")
	})
	return c, o, be, b
}

// stepDown asks the consumer's leader to step down.
func stepDown(ctx context.Context, t *testing.T, be *busnats.Backend, stream, consumer string) {
	t.Helper()
	resp, err := be.Conn().RequestWithContext(ctx, "$JS.API.CONSUMER.LEADER.STEPDOWN."+stream+"."+consumer, nil)
	require.NoError(t, err, "step the leader of consumer %s down", consumer)
	require.NotContains(t, string(resp.Data), `"error"`, "the step-down of consumer %s", consumer)
}

// settledAfter waits, up to within, for the publisher to close done,
// then up to a minute for every message it published to be acked, and
// returns the ledger's counts.
func settledAfter(t *testing.T, done <-chan struct{}, within time.Duration, l *ledger) counts {
	t.Helper()
	select {
	case <-done:
	case <-time.After(within):
		t.Fatalf("publishing did not finish within %v", within)
	}
	waitNoLoss(t, l, time.Minute)
	return l.log(t, t.Name())
}

// streamOf looks the stream up.
func streamOf(ctx context.Context, t *testing.T, be *busnats.Backend, stream string) jetstream.Stream {
	t.Helper()
	js, err := jetstream.New(be.Conn())
	require.NoError(t, err)
	st, err := js.Stream(ctx, stream)
	require.NoError(t, err, "stream %s", stream)
	return st
}

// consumerName returns the name of the stream's one durable consumer.
func consumerName(t *testing.T, be *busnats.Backend, stream string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st := streamOf(ctx, t, be, stream)
	var names []string
	consumers := st.ListConsumers(ctx)
	for c := range consumers.Info() {
		// A cluster's listing may name a consumer twice.
		if c.Config.Durable != "" && !slices.Contains(names, c.Name) {
			names = append(names, c.Name)
		}
	}
	require.NoError(t, consumers.Err())
	require.Len(t, names, 1, "stream %s has one durable consumer", stream)
	return names[0]
}

// TestClusterConsumerLeaderMovesUnderLoad: while messages flow through a
// group on a 3-node cluster, its consumer's leader steps down five
// times. The subscription's Receives never fail (its health records no
// error), and every message whose Publish returned nil is handled and
// acked.
func TestClusterConsumerLeaderMovesUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a cluster takes seconds to form")
	}
	_, o, be, b := clusterBus(t)
	l := newLedger()
	const topic, n, moves = "moves", 1000, 5
	sub, err := b.Subscribe(context.Background(), topic, recordingHandler(l), bus.WithGroup("g"),
		bus.WithStartFrom(backend.StartOldest), bus.WithAckTimeout(faultAckTimeout))
	require.NoError(t, err)

	published := make(chan int, n)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range n {
			m := &bus.Message{Payload: fmt.Appendf(nil, "m-%d", i)}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := b.Publish(ctx, topic, m)
			cancel()
			l.publish(m.ID, err)
			published <- i
		}
	}()
	stream := o.StreamPrefix + "_" + topic
	consumer := ""
	for move := range moves {
		// Each move comes after another fifth of the messages.
		for i := range published {
			if i >= (move+1)*n/(moves+1) {
				break
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if consumer == "" {
			consumer = consumerName(t, be, stream)
		}
		stepDown(ctx, t, be, stream, consumer)
		cancel()
	}
	s := settledAfter(t, done, 2*time.Minute, l)
	assert.Equal(t, n, s.Published, "every Publish returned nil")
	assert.Zero(t, s.Lost, "lost: published and never acked")
	h := sub.Health()
	assert.NoError(t, h.LastError, "no Receive failed while the leader moved")
	assert.Zero(t, h.Failing)
}
