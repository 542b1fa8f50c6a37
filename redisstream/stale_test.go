package redisstream_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/testkit/redistest"
	"github.com/eventbus-go/bus/observer"
)

// staleEnv drives one topic through the SPI.
type staleEnv struct {
	t      *testing.T
	be     backend.Backend
	client *redis.Client
	topic  string
	stream string
}

func newStaleEnv(t *testing.T) *staleEnv {
	t.Helper()
	client := redis.NewClient(redistest.Options(t))
	be := newBackend(t, client, nil)
	t.Cleanup(func() { _ = be.Close() })
	topic := uniqueTopic(t)
	return &staleEnv{t: t, be: be, client: client, topic: topic, stream: "bus:{" + topic + "}"}
}

func (e *staleEnv) subscribe(ackTimeout time.Duration) backend.Subscription {
	e.t.Helper()
	s, err := e.be.Subscribe(context.Background(), e.topic, backend.SubscribeConfig{
		Group: "g", StartFrom: backend.StartOldest, AckTimeout: ackTimeout, MaxInFlight: 10,
		MaxDeliveries: 10, Observer: observer.Nop(), DeadLetterTopic: e.topic + ".dlq",
	})
	require.NoError(e.t, err)
	e.t.Cleanup(func() { _ = s.Close() })
	return s
}

// next waits for one message on s.
func (e *staleEnv) next(s backend.Subscription) *backend.Message {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		msgs, err := s.Receive(context.Background(), 1)
		require.NoError(e.t, err)
		if len(msgs) > 0 {
			return msgs[0]
		}
	}
	e.t.Fatal("no message within 10s")
	return nil
}

// pending returns the consumer and delivery count of the only pending
// entry, or "" and 0 when nothing is pending.
func (e *staleEnv) pending() (string, int64) {
	e.t.Helper()
	p, err := e.client.XPendingExt(context.Background(), &redis.XPendingExtArgs{Stream: e.stream, Group: "g", Start: "-", End: "+", Count: 10}).Result()
	require.NoError(e.t, err)
	require.LessOrEqual(e.t, len(p), 1, "at most one entry pending")
	if len(p) == 0 {
		return "", 0
	}
	return p[0].Consumer, p[0].RetryCount
}

func TestStaleSettlementsNeverTouchTheNewerDelivery(t *testing.T) {
	e := newStaleEnv(t)
	ctx := context.Background()
	require.NoError(t, e.be.Publish(ctx, e.topic, []*backend.Message{{ID: "a", Payload: []byte("x"), PublishedAt: time.Now()}}))

	tests := []struct {
		name string
		// second delivery comes from another consumer (else the same
		// consumer reclaims its own expired entry)
		otherConsumer bool
	}{
		{name: "same consumer redelivered", otherConsumer: false},
		{name: "another consumer took it", otherConsumer: true},
	}
	s1 := e.subscribe(100 * time.Millisecond)
	first := e.next(s1)
	require.Equal(t, 1, first.Attempt)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := s1
			if tt.otherConsumer {
				s = e.subscribe(100 * time.Millisecond)
			}
			newer := e.next(s) // after the lease of the earlier delivery ran out
			require.Equal(t, first.ID, newer.ID)
			owner, count := e.pending()
			require.EqualValues(t, newer.Attempt, count, "Attempt is the delivery count")

			require.ErrorIs(t, s1.Nack(ctx, first.AckID, 0), backend.ErrStale, "Nack of the earlier delivery is stale")
			require.ErrorIs(t, s1.(backend.Extender).Extend(ctx, first.AckID), backend.ErrStale, "Extend of the earlier delivery is stale")
			require.ErrorIs(t, s1.(backend.DeadLetterer).DeadLetter(ctx, first.AckID, e.topic+".dlq",
				&backend.Message{ID: "a", Payload: []byte("x"), PublishedAt: time.Now()}), backend.ErrStale, "DeadLetter of the earlier delivery is stale")

			gotOwner, gotCount := e.pending()
			assert.Equal(t, owner, gotOwner, "the newer delivery keeps its owner")
			assert.Equal(t, count, gotCount, "the newer delivery keeps its count")
			n, err := e.client.XLen(ctx, e.stream+".dlq").Result()
			require.NoError(t, err)
			assert.Zero(t, n, "a stale DeadLetter writes no copy")
			require.NoError(t, s.(backend.Extender).Extend(ctx, newer.AckID), "the newer delivery can still be extended")
			first = newer
			s1 = s
		})
	}

	// An Ack of an expired delivery still settles an unsettled message.
	stale := first
	require.Eventually(t, func() bool {
		msgs, err := s1.Receive(ctx, 1)
		return err == nil && len(msgs) == 1
	}, 10*time.Second, time.Millisecond, "the message comes back after its lease")
	require.NoError(t, s1.Ack(ctx, []backend.AckID{stale.AckID}), "Ack of an expired delivery is never an error")
	owner, _ := e.pending()
	assert.Empty(t, owner, "the stale Ack settled the message")
	require.NoError(t, s1.Ack(ctx, []backend.AckID{stale.AckID}), "Ack of a settled message is a no-op")
	require.ErrorIs(t, s1.Nack(ctx, stale.AckID, 0), backend.ErrStale, "Nack of a settled message is stale")
}
