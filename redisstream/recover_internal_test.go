package redisstream

import (
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/observer"
)

// A read whose reply is lost leaves its entries pending to the consumer.
// The next Receive fences the lost connection, then hands out exactly
// those entries (not the ones in flight), as first deliveries whose
// settlements are not stale, before it reads anything new.
func TestReceiveAfterALostReadHandsOutWhatItTookFirstAsFirstDeliveries(t *testing.T) {
	is := newInternalSub(t, "recover", 30*time.Second, 3)
	client, b, s, ctx := is.client, is.b, is.s, is.ctx

	_, _, conn := loseARead(t, is, 5, 2)

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

// A subscription that closes after a read whose reply was lost, before a
// Receive took back what that read took, gives those entries back: the
// lost connection is fenced, the entries are claimable at once with their
// delivery uncounted, and the group's next reader hands them out at once
// as first deliveries. What the subscription had in flight keeps its
// lease.
func TestCloseAfterALostReadGivesWhatItTookBack(t *testing.T) {
	const lease = 30 * time.Second
	is := newInternalSub(t, "giveback", lease, 3)
	client, b, s, ctx, topic := is.client, is.b, is.s, is.ctx, is.topic

	inFlight, lost, conn := loseARead(t, is, 4, 2)

	require.NoError(t, s.Close(), "close before any Receive took them back")
	assert.Error(t, conn.Ping(ctx).Err(), "the lost read's connection is killed before the give-back")

	pending, err := client.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: s.keys.stream, Group: "g", Start: "-", End: "+", Count: 10}).Result()
	require.NoError(t, err, "xpending")
	byID := map[string]redis.XPendingExt{}
	for _, p := range pending {
		byID[p.ID] = p
	}
	for _, e := range lost {
		p, ok := byID[e.ID]
		require.True(t, ok, "%s stays pending", e.ID)
		assert.GreaterOrEqual(t, p.Idle, lease, "%s: claimable at once", e.ID)
		assert.EqualValues(t, 0, p.RetryCount, "%s: the lost delivery is uncounted", e.ID)
	}
	for _, m := range inFlight {
		ref, _ := entryOf(m.AckID)
		assert.Less(t, byID[ref.id].Idle, lease/2, "%s: in flight, its lease runs on", m.ID)
	}

	next, err := b.Subscribe(ctx, topic, backend.SubscribeConfig{
		Group: "g", AckTimeout: lease, MaxInFlight: 10, StartFrom: backend.StartOldest, Observer: observer.Nop(),
	})
	require.NoError(t, err, "the group's next reader")
	t.Cleanup(func() { _ = next.Close() })
	got, err := next.Receive(ctx, 10)
	require.NoError(t, err, "the next reader's first receive")
	var ids []string
	for _, m := range got {
		ids = append(ids, m.ID)
		assert.Equal(t, 1, m.Attempt, "%s: no handler saw the lost delivery: Attempt 1", m.ID)
	}
	assert.Equal(t, []string{"m-2", "m-3"}, ids, "the next reader claims what the lost read took at once, and nothing in flight")
}

// loseARead publishes n entries to is's topic, takes two with a Receive
// (they stay in flight), and has a read of is's consumer for count more
// run at the server with its reply lost: the subscription is recovering,
// the read's connection registered as lost. It returns the deliveries in
// flight, the entries the lost read took, and its connection.
func loseARead(t *testing.T, is *internalSub, n, count int) ([]*backend.Message, []redis.XMessage, *redis.Conn) {
	t.Helper()
	client, b, s, ctx, topic := is.client, is.b, is.s, is.ctx, is.topic
	for i := range n {
		require.NoError(t, b.Publish(ctx, topic, []*backend.Message{{ID: "m-" + strconv.Itoa(i), Payload: []byte("x")}}), "publish")
	}
	inFlight, err := s.Receive(ctx, 2)
	require.NoError(t, err, "first receive")
	require.Len(t, inFlight, 2, "the first receive takes two entries, which stay in flight")

	// A read of this consumer runs at the server but its reply is lost.
	lost, err := client.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: s.consumer, Streams: []string{s.keys.stream, ">"}, Count: int64(count)}).Result()
	require.NoError(t, err, "the read whose reply is lost")
	require.Len(t, lost[0].Messages, count)
	conn := client.Conn()
	t.Cleanup(func() { _ = conn.Close() })
	connID, err := conn.ClientID(ctx).Result()
	require.NoError(t, err, "client id of the lost read's connection")
	s.reader.mu.Lock()
	s.reader.lost = append(s.reader.lost, lostRead{node: client, id: connID, fixed: true})
	s.reader.mu.Unlock()
	s.setRecovering(true)
	return inFlight, lost[0].Messages, conn
}

// A subscription that closes after a lost read took more than Close gives
// back says so: its Close fails (and the bus then lets a key-ordered
// group's lock lapse), and the first maxGiveBack entries are claimable.
func TestCloseThatCannotGiveEverythingBackSaysSo(t *testing.T) {
	const lease = 30 * time.Second
	is := newInternalSub(t, "givebackmax", lease, 3)
	_, lost, _ := loseARead(t, is, maxGiveBack+12, maxGiveBack+10)

	err := is.s.Close()
	require.Error(t, err, "a close that leaves entries to their lease fails")
	assert.Contains(t, err.Error(), "come back after their lease", "the error says what happens to them")

	pending, err := is.client.XPendingExt(is.ctx, &redis.XPendingExtArgs{Stream: is.s.keys.stream, Group: "g", Start: lost[0].ID, End: "+", Count: int64(len(lost))}).Result()
	require.NoError(t, err, "xpending")
	claimable := 0
	for _, p := range pending {
		if p.Idle >= lease {
			claimable++
		}
	}
	assert.Equal(t, maxGiveBack, claimable, "the first maxGiveBack entries are given back, the rest keep their lease")
}
