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
// a keyed message in the partition Kafka's own producers choose (murmur2
// of the key) and one without a key in backend.PartitionOf of its ID.
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
			want := backend.PartitionOf("", id, 5)
			if r.Key != nil {
				want = javaPartition(r.Key, 5)
			}
			require.Equal(t, int32(want), r.Partition, "message %s (key %q) in its partition", id, r.Key)
			seen++
		})
	}
}

// javaPartition is the partition Kafka's Java producer gives key among
// n: murmur2 (seed 0x9747b28c), the sign bit masked, modulo n. It is
// written out here, apart from the backend's, so that the test checks
// the backend against Kafka's algorithm rather than against itself.
func javaPartition(key []byte, n int) int {
	const m, r = 0x5bd1e995, 24
	length := len(key)
	h := uint32(0x9747b28c) ^ uint32(length)
	for i := 0; i+4 <= length; i += 4 {
		k := uint32(key[i]) | uint32(key[i+1])<<8 | uint32(key[i+2])<<16 | uint32(key[i+3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	tail := key[length&^3:]
	switch len(tail) {
	case 3:
		h ^= uint32(tail[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(tail[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(tail[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return int(h&0x7fffffff) % n
}
