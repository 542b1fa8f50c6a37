package nats_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/testkit/natstest"
	busnats "github.com/eventbus-go/bus/nats"
)

// groupPending returns the Pending of group on topic as Groups reports
// it; -1 when the group is not listed.
func groupPending(t *testing.T, be *busnats.Backend, topic, group string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	gs, err := be.Groups(ctx, topic)
	require.NoError(t, err, "groups of %q", topic)
	for _, g := range gs {
		if g.Name == group {
			return int64(g.Pending)
		}
	}
	return -1
}

// TestGroupPendingCountsNackedDeliveriesUntilRedelivered pins what the
// handover of a key-ordered group reads from the server (the consumer's
// num_ack_pending through Groups): a delivery nacked with or without a
// delay stays pending until it is delivered again and settled, a
// terminated one (dead-lettered) is settled at once. A new owner of the
// group's lock therefore never starts while a nacked message of the
// previous owner waits to come back, and waits at most one ack timeout
// when nobody fetches it.
func TestGroupPendingCountsNackedDeliveriesUntilRedelivered(t *testing.T) {
	url := natstest.Start(t).URL()
	be := connect(t, url, isolated(t, url, busnats.Options{}))
	defer be.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const topic, group = "pending", "billing-eu"
	sub, err := be.Subscribe(ctx, topic, backend.SubscribeConfig{Group: group, AckTimeout: 30 * time.Second, MaxInFlight: 8, StartFrom: backend.StartOldest})
	require.NoError(t, err)
	defer sub.Close()
	for i := range 4 {
		require.NoError(t, be.Publish(ctx, topic, []*backend.Message{{ID: fmt.Sprint("m", i), Payload: []byte("x")}}))
	}
	var got []*backend.Message
	require.Eventually(t, func() bool {
		ms, err := sub.Receive(ctx, 4-len(got))
		got = append(got, kept(ms)...)
		return err == nil && len(got) == 4
	}, 10*time.Second, 10*time.Millisecond, "the four messages delivered")
	assert.EqualValues(t, 4, groupPending(t, be, topic, group), "four delivered, none settled")

	require.NoError(t, sub.Ack(ctx, []backend.AckID{got[0].AckID}))
	require.NoError(t, sub.Nack(ctx, got[1].AckID, 0))
	require.NoError(t, sub.Nack(ctx, got[2].AckID, time.Hour))
	require.NoError(t, sub.(backend.DeadLetterer).DeadLetter(ctx, got[3].AckID, topic+".dlq", got[3]))
	require.Eventually(t, func() bool { return groupPending(t, be, topic, group) == 2 }, 5*time.Second, 10*time.Millisecond,
		"acked and terminated deliveries settle; the nacked ones stay pending until delivered again")

	again, err := sub.Receive(ctx, 4)
	require.NoError(t, err)
	require.Len(t, again, 1, "the message nacked without a delay comes back, the delayed one not yet")
	assert.Equal(t, got[1].ID, again[0].ID)
	require.NoError(t, sub.Ack(ctx, []backend.AckID{again[0].AckID}))
	require.Eventually(t, func() bool { return groupPending(t, be, topic, group) == 1 }, 5*time.Second, 10*time.Millisecond,
		"the delayed nack is pending until its delay ends and it is settled")
}

// TestGroupsNameTheGroupOfAConsumerWithoutMetadata: servers before 2.10
// keep no consumer metadata, so Groups reads the group from the
// consumer's name. The handover of a key-ordered group looks its pending
// count up by group name: with the escaped consumer name instead, it
// found nothing and waited a whole ack timeout on every rebalance.
func TestGroupsNameTheGroupOfAConsumerWithoutMetadata(t *testing.T) {
	for _, mode := range []busnats.StreamMode{busnats.StreamPerTopic, busnats.StreamShared} {
		t.Run(fmt.Sprint(mode), func(t *testing.T) {
			// A server of its own, as in TestDeliverAtIsAServerSchedule:
			// the shared stream created on a server where the other
			// mode's streams were just deleted failed now and then under
			// load (error creating store for stream).
			url := natstest.Start(t).URL()
			o := isolated(t, url, busnats.Options{StreamMode: mode})
			be := connect(t, url, o)
			defer be.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			const topic, group = "orders.eu~3", "billing-eu_x:1"
			require.NoError(t, be.Publish(ctx, topic, []*backend.Message{{ID: "a", Payload: []byte("x")}}))
			js, err := jetstream.New(be.Conn())
			require.NoError(t, err)
			stream, consumer := o.StreamPrefix+"_orders-eu_p3", "billing_heu__x_c1"
			if mode == busnats.StreamShared {
				stream, consumer = o.StreamName, consumer+"_torders-eu_p3"
			}
			_, err = js.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{
				Durable: consumer, AckPolicy: jetstream.AckExplicitPolicy,
				FilterSubject: o.SubjectPrefix + "." + topic, DeliverPolicy: jetstream.DeliverAllPolicy,
			})
			require.NoError(t, err, "a consumer as the backend names it, without metadata")
			assert.Zero(t, groupPending(t, be, topic, group), "the group is listed by its name, nothing pending")
		})
	}
}

// TestDeleteTopicForgetsThePartitionCount: deleting a partitioned topic
// deletes its partitions' streams and its recorded count, so the topic
// can be created again with another count.
func TestDeleteTopicForgetsThePartitionCount(t *testing.T) {
	for _, mode := range []busnats.StreamMode{busnats.StreamPerTopic, busnats.StreamShared} {
		t.Run(fmt.Sprint(mode), func(t *testing.T) {
			// A server per mode, for the reason TestGroupsNameTheGroupOfAConsumerWithoutMetadata gives.
			url := natstest.Start(t).URL()
			be := connect(t, url, isolated(t, url, busnats.Options{StreamMode: mode}))
			b := bus.New(be)
			defer func() { assert.NoError(t, b.Close(context.Background())) }()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			const topic = "orders"
			require.NoError(t, b.CreateTopic(ctx, topic, 4))
			require.NoError(t, b.CreateTopic(ctx, topic, 4), "the same count again is not an error")
			require.ErrorIs(t, b.CreateTopic(ctx, topic, 2), backend.ErrPartitionMismatch)
			for i := range 16 {
				require.NoError(t, b.Publish(ctx, topic, &bus.Message{Key: fmt.Sprint("k", i), Payload: []byte("x")}))
			}
			msgs := 0
			for p := range 4 {
				ms, _, err := be.Peek(ctx, backend.PartitionTopic(topic, p), "", 100)
				require.NoError(t, err)
				msgs += len(ms)
			}
			assert.Equal(t, 16, msgs, "every message is in one of the partitions")

			require.NoError(t, b.DeleteTopic(ctx, topic))
			n, err := be.Partitions(ctx, topic, 0)
			require.NoError(t, err)
			assert.Zero(t, n, "the count is forgotten")
			for p := range 4 {
				ms, _, err := be.Peek(ctx, backend.PartitionTopic(topic, p), "", 100)
				require.NoError(t, err)
				assert.Empty(t, ms, "partition %d deleted", p)
			}
			require.NoError(t, b.CreateTopic(ctx, topic, 2), "created again with another count")
		})
	}
}
