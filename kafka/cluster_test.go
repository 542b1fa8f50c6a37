package kafka_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/testkit/faultproxy/faultsuite"
	"github.com/eventbus-go/bus/internal/testkit/kafkatest"
)

// TestOnThreeBrokers runs the tests that need a cluster on three private
// brokers, in parallel with TestOnOneBroker.
func TestOnThreeBrokers(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: starts three brokers")
	}
	c := kafkatest.StartCluster(t, 3)
	t.Run("PartitionLeaderKilledMidRun", func(t *testing.T) { testLeaderKilledMidRun(t, c) })
	// The suite on topics replicated three times.
	testSuite(t, c.URL())
}

// testLeaderKilledMidRun publishes to a topic of three partitions, each
// on three replicas, while a group of two members consumes it, and kills
// the leader of partition 0 mid-run: nothing Publish confirmed is lost.
func testLeaderKilledMidRun(t *testing.T, c *kafkatest.Cluster) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := bus.Open(ctx, c.URL()+"?partitions=3&session_timeout=6s&request_timeout=3s")
	require.NoError(t, err)
	defer b.Close(context.Background())
	const topic = "leaderkill"
	ledger := faultsuite.NewLedger()
	for i := range 2 {
		name := fmt.Sprintf("member%d", i)
		// Not ctx: a subscription ends with its Subscribe ctx, and the
		// run outlasts the setup's bound on a loaded machine.
		_, err := b.Subscribe(context.Background(), topic, func(_ context.Context, d *bus.Delivery) error {
			ledger.Deliver(name, d.ID, d.Attempt)
			return nil
		}, bus.WithGroup("g"), bus.WithAckTimeout(5*time.Second))
		require.NoError(t, err)
	}

	var confirmed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			msgs := make([]*bus.Message, 10)
			ids := make([]string, 10)
			for j := range msgs {
				ids[j] = fmt.Sprintf("m%d-%d", i, j)
				msgs[j] = &bus.Message{ID: ids[j], Key: fmt.Sprintf("k%d", j), Payload: []byte("x")}
			}
			pctx, pcancel := context.WithTimeout(context.Background(), 3*time.Second)
			err := b.Publish(pctx, topic, msgs...)
			pcancel()
			ledger.Publish(ids, err)
			if err == nil {
				confirmed.Add(10)
			}
		}
	})
	stopPublishing := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopPublishing()

	require.Eventually(t, func() bool { return confirmed.Load() >= 300 }, 30*time.Second, 10*time.Millisecond, "publishing runs")
	leader := leaderOf(t, c, topic, 0)
	t.Logf("killing broker %d, the leader of partition 0", leader.ID())
	leader.Kill()
	resumed := confirmed.Load() + 300
	require.Eventually(t, func() bool { return confirmed.Load() >= resumed }, 60*time.Second, 10*time.Millisecond,
		"publishing goes on with a new leader")
	leader.Restart()
	stopPublishing()
	if !assert.Eventually(t, func() bool { return ledger.Summary().Lost == 0 }, 60*time.Second, 50*time.Millisecond,
		"every confirmed message is delivered") {
		explainLost(t, c, topic, "g", ledger.Lost())
	}
	s := ledger.Log(t, "leader killed")
	require.Zero(t, s.Lost)
}

// explainLost logs where the lost messages are in the topic (the broker
// has them or not) and the group's commits, so that a loss shows whether
// the producer or the group lost them.
func explainLost(t *testing.T, c *kafkatest.Cluster, topic, group string, lost []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(ctx, topic)
	require.NoError(t, err)
	want := map[string]bool{}
	for _, id := range lost {
		want[id] = true
	}
	left := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			left[o.Partition] = o.Offset
		}
	})
	for len(left) > 0 && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			for _, h := range r.Headers {
				if h.Key == "bus-kafka-id" && want[string(h.Value)] {
					t.Logf("lost %s is in the log: partition %d offset %d", h.Value, r.Partition, r.Offset)
					delete(want, string(h.Value))
				}
			}
			if r.Offset+1 >= left[r.Partition] {
				delete(left, r.Partition)
			}
		})
	}
	t.Logf("lost and not in the log (never stored): %d of %d", len(want), len(lost))
	if offs, err := adm.FetchOffsets(ctx, group); err == nil {
		offs.Each(func(o kadm.OffsetResponse) {
			t.Logf("group %s commit: partition %d offset %d metadata %q (end %d)", group, o.Partition, o.At, o.Metadata, ends[topic][o.Partition].Offset)
		})
	}
}

// leaderOf returns the node that leads partition p of topic.
func leaderOf(t *testing.T, c *kafkatest.Cluster, topic string, p int32) *kafkatest.Node {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	td, err := kadm.NewClient(cl).ListTopics(ctx, topic)
	require.NoError(t, err)
	leader := td[topic].Partitions[p].Leader
	for _, n := range c.Nodes {
		if int32(n.ID()) == leader {
			return n
		}
	}
	t.Fatalf("no node leads partition %d of %q (leader %d)", p, topic, leader)
	return nil
}
