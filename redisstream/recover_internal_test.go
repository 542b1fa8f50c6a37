package redisstream

import (
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
)

// A read whose reply is lost leaves its entries pending to the consumer.
// The next Receive fences the lost connection, then hands out exactly
// those entries (not the ones in flight), as first deliveries whose
// settlements are not stale, before it reads anything new.
func TestReceiveAfterALostReadHandsOutWhatItTookFirstAsFirstDeliveries(t *testing.T) {
	is := newInternalSub(t, "recover", 30*time.Second, 3)
	client, b, s, ctx, topic := is.client, is.b, is.s, is.ctx, is.topic

	for i := range 5 {
		require.NoError(t, b.Publish(ctx, topic, []*backend.Message{{ID: "m-" + strconv.Itoa(i), Payload: []byte("x")}}), "publish")
	}
	inFlight, err := s.Receive(ctx, 2)
	require.NoError(t, err, "first receive")
	require.Len(t, inFlight, 2, "the first receive takes two entries, which stay in flight")

	// A read of this consumer runs at the server but its reply is lost.
	lost, err := client.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: s.consumer, Streams: []string{s.keys.stream, ">"}, Count: 2}).Result()
	require.NoError(t, err, "the read whose reply is lost")
	require.Len(t, lost[0].Messages, 2)
	conn := client.Conn()
	t.Cleanup(func() { _ = conn.Close() })
	connID, err := conn.ClientID(ctx).Result()
	require.NoError(t, err, "client id of the lost read's connection")
	s.reader.mu.Lock()
	s.reader.lost = append(s.reader.lost, lostRead{node: client, id: connID, fixed: true})
	s.reader.mu.Unlock()
	s.recovering = true

	got, err := s.Receive(ctx, 10)
	require.NoError(t, err, "receive after the lost read")
	var ids []string
	for _, m := range got {
		ids = append(ids, m.ID)
		assert.Equal(t, 1, m.Attempt, "%s: no handler saw the lost delivery: Attempt 1", m.ID)
	}
	require.Equal(t, []string{"m-2", "m-3"}, ids, "the receive hands out what the lost read took, and nothing in flight")
	assert.Error(t, conn.Ping(ctx).Err(), "the lost read's connection is killed before the recovery")
	assert.Empty(t, s.reader.lostReads(), "the fenced connection is forgotten")

	pending, err := client.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: s.keys.stream, Group: "g", Start: "-", End: "+", Count: 10}).Result()
	require.NoError(t, err, "xpending")
	for _, p := range pending {
		assert.EqualValues(t, 1, p.RetryCount, "%s: taking it back counts no delivery", p.ID)
		assert.Less(t, p.Idle, 5*time.Second, "%s: its lease runs from now", p.ID)
	}
	for _, m := range got {
		require.NoError(t, s.Extend(ctx, m.AckID), "%s: a recovered delivery is the current one, not stale", m.ID)
	}

	next, err := s.Receive(ctx, 10)
	require.NoError(t, err, "the receive after the recovery")
	require.Len(t, next, 1, "it reads new entries again")
	assert.Equal(t, "m-4", next[0].ID)
	assert.Equal(t, 1, next[0].Attempt)
	assert.EqualValues(t, 2, b.Stats().Recovered, "Stats counts the recovered entries")
}
