package nats

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/testkit/natstest"
	"github.com/eventbus-go/bus/observer"
)

// Deliveries of a request the member gave up on that arrive beyond what
// a Receive may return are handed back in order, before anything after
// them, and come back with the Attempt they had: no handler saw them.
func TestDeliveriesBeyondMaxComeBackFirstWithTheirAttempt(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, s, topic := newInternalSub(ctx, t, "excess")
	for i := range 4 {
		require.NoError(t, b.Publish(ctx, topic, []*backend.Message{{ID: "m-" + strconv.Itoa(i), Payload: []byte("x")}}), "publish")
	}

	// A request for three whose end the member never waited for: its
	// deliveries land in the inbox. It waits for them: a no_wait request
	// may reach the consumer before the stream has told it of the last
	// publishes, and end with "no messages".
	_, err := s.request(3, pullWait)
	require.NoError(t, err, "the request given up on")
	require.Eventually(t, func() bool {
		return len(s.in.ch) >= 3
	}, 5*time.Second, 5*time.Millisecond, "the request's deliveries reach the inbox")

	first, err := s.Receive(ctx, 1)
	require.NoError(t, err, "receive one")
	require.Len(t, first, 1)
	assert.Equal(t, "m-0", first[0].ID)

	var ids []string
	require.Eventually(t, func() bool {
		got, err := s.Receive(ctx, 10)
		require.NoError(t, err, "receive the rest")
		for _, m := range got {
			ids = append(ids, m.ID)
			assert.Equal(t, 1, m.Attempt, "%s: handed back unseen, it keeps Attempt 1", m.ID)
		}
		return len(ids) >= 3
	}, 10*time.Second, time.Millisecond, "the rest arrives")
	assert.Equal(t, []string{"m-1", "m-2", "m-3"}, ids, "what was handed back comes before what follows it")
}

// newInternalSub connects a Backend to the test server and subscribes
// group "g" of a new topic named after prefix from its oldest message,
// with a 30s ack timeout, 10 in flight and 5 deliveries at most.
func newInternalSub(ctx context.Context, t *testing.T, prefix string) (*Backend, *jsSub, string) {
	t.Helper()
	b, err := Connect(ctx, natstest.URL(t), nil)
	require.NoError(t, err, "connect")
	t.Cleanup(func() { _ = b.Close() })
	topic := prefix + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	bsub, err := b.Subscribe(ctx, topic, backend.SubscribeConfig{
		Group: "g", AckTimeout: 30 * time.Second, MaxInFlight: 10, MaxDeliveries: 5,
		StartFrom: backend.StartOldest, Observer: observer.Nop(),
	})
	require.NoError(t, err, "subscribe")
	s := bsub.(*jsSub)
	t.Cleanup(func() { _ = s.Close() })
	return b, s, topic
}
