package kafka_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/testkit/kafkatest"
)

// testEventsTopicBoundedByAge: the lifecycle events topic, which no group
// reads, is bounded by WithEventsRetention's age with no subscriber
// running: its oldest records are deleted once they are past the bound
// (the test broker checks retention every second).
func testEventsTopicBoundedByAge(t *testing.T, node *kafkatest.Node) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	events := fmt.Sprintf("events.bounded.%d", time.Now().UnixNano())
	b, err := bus.Open(ctx, node.URL(), bus.WithEvents(events), bus.WithEventsRetention(2*time.Second, 100))
	require.NoError(t, err)
	defer b.Close(context.Background())
	cl, err := kgo.NewClient(kgo.SeedBrokers(node.Addr()))
	require.NoError(t, err)
	defer cl.Close()
	adm := kadm.NewClient(cl)

	work := fmt.Sprintf("events.work.%d", time.Now().UnixNano())
	handled := make(chan struct{}, 1024)
	_, err = b.Subscribe(context.Background(), work, func(context.Context, *bus.Delivery) error {
		handled <- struct{}{}
		return nil
	})
	require.NoError(t, err)
	publish := func() {
		require.NoError(t, b.Publish(ctx, work, &bus.Message{Payload: []byte("x")}))
		select {
		case <-handled:
		case <-ctx.Done():
			t.Fatal("a message was not handled")
		}
	}
	for range 20 {
		publish() // each handled message is events on the events topic
	}
	// sum adds the offsets of the events topic's partitions; 0 before
	// the topic exists.
	sum := func(offsets func(context.Context, ...string) (kadm.ListedOffsets, error)) int64 {
		got, err := offsets(ctx, events)
		if err != nil {
			return 0
		}
		var n int64
		got.Each(func(o kadm.ListedOffset) {
			if o.Err == nil && o.Offset > 0 {
				n += o.Offset
			}
		})
		return n
	}
	// The bus sends events in batches, a moment after they happen.
	var first int64
	require.Eventually(t, func() bool {
		first = sum(adm.ListEndOffsets)
		return first > 0
	}, 30*time.Second, 50*time.Millisecond, "the handled messages made events")
	// Kafka rolls a segment (and may then delete it) only on an append
	// after the segment is segment.ms old: keep making events while
	// waiting for the first ones to go.
	deadline := time.Now().Add(60 * time.Second)
	for sum(adm.ListStartOffsets) < first {
		require.True(t, time.Now().Before(deadline), "the first %d events are deleted within 60 s of a 2 s bound", first)
		publish()
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(200 * time.Millisecond): // the publish rate, not a wait for a condition
		}
	}
}
