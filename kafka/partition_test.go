package kafka_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/testkit/kafkatest"
	"github.com/eventbus-go/bus/kafka"
)

// testPartitionedTopic: CreateTopic makes a Kafka topic of that many
// partitions, refuses another count once it exists, and Publish puts
// each message in partition backend.PartitionOf(Key, ID, n), keyed or
// not, as the bus routes partitioned topics everywhere.
func testPartitionedTopic(t *testing.T, node *kafkatest.Node) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	be, err := kafka.New(ctx, &kafka.Options{Seeds: []string{node.Addr()}})
	require.NoError(t, err)
	b := bus.New(be)
	defer b.Close(context.Background())
	topic := fmt.Sprintf("parted.%d", time.Now().UnixNano())

	_, err = be.TopicPartitions(ctx, topic, backend.MaxPartitions+1)
	require.ErrorIs(t, err, bus.ErrInvalidOption, "a count over the bound is refused")
	n, err := be.TopicPartitions(ctx, topic, 0)
	require.NoError(t, err)
	require.Zero(t, n, "a missing topic reads 0 and is not created")
	require.NoError(t, b.CreateTopic(ctx, topic, 5))
	require.NoError(t, b.CreateTopic(ctx, topic, 5), "the same count again")
	require.ErrorIs(t, b.CreateTopic(ctx, topic, 3), backend.ErrPartitionMismatch)

	var msgs []*bus.Message
	for i := range 60 {
		m := &bus.Message{ID: fmt.Sprintf("id-%d", i), Payload: []byte("x")}
		if i%3 != 0 {
			m.Key = fmt.Sprintf("key-%d", i%17)
		}
		msgs = append(msgs, m)
	}
	require.NoError(t, b.Publish(ctx, topic, msgs...))

	cl, err := kgo.NewClient(kgo.SeedBrokers(node.Addr()), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	seen := 0
	for seen < len(msgs) {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "every record is read back")
		fs.EachRecord(func(r *kgo.Record) {
			var id string
			for _, h := range r.Headers {
				if h.Key == "bus-kafka-id" {
					id = string(h.Value)
				}
			}
			want := backend.PartitionOf(string(r.Key), id, 5)
			require.Equal(t, int32(want), r.Partition, "message %s (key %q) in the bus's partition", id, r.Key)
			seen++
		})
	}
}
