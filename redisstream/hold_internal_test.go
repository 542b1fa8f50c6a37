package redisstream

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/testkit/redistest"
)

// holdFixture is a topic with a group "g" on a server, driven through the
// scripts alone: no promoter runs.
type holdFixture struct {
	t      *testing.T
	ctx    context.Context
	client *redis.Client
	k      keys
}

func newHoldFixture(t *testing.T) *holdFixture {
	t.Helper()
	client := redis.NewClient(redistest.Options(t))
	t.Cleanup(func() { _ = client.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	k := newKeys("bus", "hold-"+strconv.FormatInt(time.Now().UnixNano(), 36))
	t.Cleanup(func() { _ = client.Del(context.Background(), k.stream, k.hold, k.held, k.lease).Err() })
	require.NoError(t, client.XGroupCreateMkStream(ctx, k.stream, "g", "$").Err())
	return &holdFixture{t: t, ctx: ctx, client: client, k: k}
}

// deliver publishes an entry and reads it as consumer a (delivery 1).
func (f *holdFixture) deliver() string {
	f.t.Helper()
	id, err := f.client.XAdd(f.ctx, &redis.XAddArgs{Stream: f.k.stream, Values: []any{"p", "x"}}).Result()
	require.NoError(f.t, err)
	res, err := f.client.XReadGroup(f.ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "a", Streams: []string{f.k.stream, ">"}, Count: 1, Block: -1}).Result()
	require.NoError(f.t, err)
	require.Equal(f.t, id, res[0].Messages[0].ID)
	return id
}

// nack runs nackScript for consumer's delivery count of id with a hold
// of delay on an ack timeout of at.
func (f *holdFixture) nack(consumer, id string, count int, delay, at time.Duration, counted bool) {
	f.t.Helper()
	uncount := "1"
	if counted {
		uncount = "0"
	}
	r, err := nackScript.Run(f.ctx, f.client, []string{f.k.stream, f.k.hold, f.k.held},
		"g", consumer, id, 0, delay.Milliseconds(), at.Milliseconds(), count, uncount).Int64()
	require.NoError(f.t, err)
	require.EqualValues(f.t, 1, r, "the nack applies")
}

// stall makes id idle for an hour, as it is when no promoter kept it
// fresh for that long.
func (f *holdFixture) stall(id string) {
	f.t.Helper()
	p := f.pending(id)
	require.NoError(f.t, f.client.Do(f.ctx, "XCLAIM", f.k.stream, "g", p.Consumer, 0, id, "IDLE", time.Hour.Milliseconds(), "JUSTID").Err())
}

// reclaim runs autoclaimScript as consumer b with ack timeout at over the
// whole pending list and returns the ids handed out with their counts.
func (f *holdFixture) reclaim(at time.Duration) map[string]int64 {
	f.t.Helper()
	reply, err := autoclaimScript.Run(f.ctx, f.client, []string{f.k.stream, f.k.lease, f.k.hold, f.k.held},
		"g", "b", at.Milliseconds(), "0-0", 100).Slice()
	require.NoError(f.t, err)
	require.Len(f.t, reply, 3)
	raw := reply[1].([]any)
	require.Equal(f.t, "0-0", raw[0], "the scan covers the pending list in one call")
	entries := raw[1].([]any)
	counts := reply[2].([]any)
	require.Len(f.t, counts, len(entries), "one count per entry handed out")
	out := map[string]int64{}
	for i, e := range entries {
		out[e.([]any)[0].(string)] = counts[i].(int64)
	}
	return out
}

func (f *holdFixture) pending(id string) redis.XPendingExt {
	f.t.Helper()
	p, err := f.client.XPendingExt(f.ctx, &redis.XPendingExtArgs{Stream: f.k.stream, Group: "g", Start: id, End: id, Count: 1}).Result()
	require.NoError(f.t, err)
	require.Len(f.t, p, 1, "entry %s is pending", id)
	return p[0]
}

// holds returns the hold ZSET and the hold index.
func (f *holdFixture) holds() ([]redis.Z, map[string]string) {
	f.t.Helper()
	z, err := f.client.ZRangeWithScores(f.ctx, f.k.hold, 0, -1).Result()
	require.NoError(f.t, err)
	h, err := f.client.HGetAll(f.ctx, f.k.held).Result()
	require.NoError(f.t, err)
	return z, h
}

// serverMs is the server's clock in Unix ms.
func (f *holdFixture) serverMs() int64 {
	f.t.Helper()
	now, err := f.client.Time(f.ctx).Result()
	require.NoError(f.t, err)
	return now.UnixMilli()
}

// moveDue sets the due time of id's hold (its only one).
func (f *holdFixture) moveDue(id string, due int64) {
	f.t.Helper()
	_, idx := f.holds()
	v, ok := idx["g\x00"+id]
	require.True(f.t, ok, "entry %s is held", id)
	a := len(v)
	for n, i := 0, 0; i < len(v); i++ {
		if v[i] == 0 {
			if n++; n == 2 {
				a = i
				break
			}
		}
	}
	require.NoError(f.t, f.client.ZAddXX(f.ctx, f.k.hold, redis.Z{Score: float64(due), Member: "g\x00" + id + "\x00" + v[:a]}).Err())
}

// TestReclaimPutsBackAHeldEntryUntilItsDueTime: with no promoter pass at
// all, an entry nacked with a delay far past the ack timeout and idle
// far past its lease is not handed out by the reclaim: it stays pending
// to its owner with the delivery count of the nack and a fresh idle
// time, and its hold stays. Once the due time is within the lease, the
// reclaim gives it the idle time that makes it claimable at its due
// time and drops the hold; once the due time has passed, the reclaim
// hands it out, counting one delivery, and drops the hold.
func TestReclaimPutsBackAHeldEntryUntilItsDueTime(t *testing.T) {
	const at = 10 * time.Second
	f := newHoldFixture(t)
	far, near, past, plain := f.deliver(), f.deliver(), f.deliver(), f.deliver()
	for _, id := range []string{far, near, past} {
		f.nack("a", id, 1, time.Hour, at, true)
	}
	z, idx := f.holds()
	require.Len(t, z, 3, "each nack records a hold")
	assert.Equal(t, "10000\x001\x00a", idx["g\x00"+far], "the index names the hold's ack timeout, count and owner")
	nowMs := f.serverMs()
	assert.InDelta(t, float64(nowMs+time.Hour.Milliseconds()), z[0].Score, 5000, "the due time is an hour on the server's clock")

	f.moveDue(near, nowMs+at.Milliseconds()/2)
	f.moveDue(past, nowMs-1)
	for _, id := range []string{far, near, past, plain} {
		f.stall(id)
	}
	got := f.reclaim(at)
	assert.Equal(t, map[string]int64{past: 2, plain: 2}, got,
		"only the entry whose hold is due and the one never held are handed out, each with one more delivery")

	p := f.pending(far)
	assert.Equal(t, "a", p.Consumer, "a held entry put back keeps its owner")
	assert.EqualValues(t, 1, p.RetryCount, "a held entry put back keeps its delivery count")
	assert.Less(t, p.Idle, at/2, "a held entry put back starts its idle time afresh")

	p = f.pending(near)
	assert.Equal(t, "a", p.Consumer)
	assert.EqualValues(t, 1, p.RetryCount)
	assert.GreaterOrEqual(t, p.Idle, at/2, "an entry due within the lease is claimable at its due time, not before")
	assert.Less(t, p.Idle, at, "an entry due within the lease is not claimable yet")

	z, idx = f.holds()
	require.Len(t, z, 1, "the holds of the entries due and due within the lease are dropped")
	assert.Equal(t, "g\x00"+far+"\x0010000\x001", z[0].Member)
	assert.Equal(t, map[string]string{"g\x00" + far: "10000\x001\x00a"}, idx, "the index drops them with them")

	// Without a promoter the entry goes idle past its lease again, and
	// again the reclaim puts it back; once due, it is handed out.
	f.stall(far)
	assert.Empty(t, f.reclaim(at), "the held entry is put back on every reclaim until due")
	assert.EqualValues(t, 1, f.pending(far).RetryCount, "no delivery is counted by a put-back")
	f.moveDue(far, f.serverMs()-1)
	f.stall(far)
	assert.Equal(t, map[string]int64{far: 2}, f.reclaim(at), "the held entry is handed out once due, with one more delivery")
	z, idx = f.holds()
	assert.Empty(t, z, "no hold is left")
	assert.Empty(t, idx, "no index entry is left")
}

// TestReclaimPutsBackAnUncountedHoldWithItsLoweredCount: a held release
// or snooze (uncounted) keeps its lowered delivery count through a
// put-back, so the delivery that ends it carries the released one's
// count.
func TestReclaimPutsBackAnUncountedHoldWithItsLoweredCount(t *testing.T) {
	const at = 10 * time.Second
	f := newHoldFixture(t)
	id := f.deliver()
	f.nack("a", id, 1, time.Hour, at, false)
	assert.EqualValues(t, 0, f.pending(id).RetryCount, "the release lowers the count")
	f.stall(id)
	assert.Empty(t, f.reclaim(at), "the held entry is put back")
	assert.EqualValues(t, 0, f.pending(id).RetryCount, "with its lowered count")
	f.moveDue(id, f.serverMs()-1)
	f.stall(id)
	assert.Equal(t, map[string]int64{id: 1}, f.reclaim(at), "handed out once due with the released delivery's count")
}

// TestStaleHoldsLeaveTheIndex: a hold whose entry was delivered since
// (its count moved) does not keep the entry from its new owner and
// leaves the index; a new hold of the entry replaces the old one; the
// promoter drops a settled entry's hold from the index too, and adds a
// kept hold the index lacks.
func TestStaleHoldsLeaveTheIndex(t *testing.T) {
	const at = 10 * time.Second
	f := newHoldFixture(t)
	moved, renacked, settled, missing := f.deliver(), f.deliver(), f.deliver(), f.deliver()
	for _, id := range []string{moved, renacked, settled, missing} {
		f.nack("a", id, 1, time.Hour, at, true)
	}
	// Delivered again anyway (a counting XCLAIM, as a member that does
	// not know holds would).
	for _, id := range []string{moved, renacked} {
		require.NoError(t, f.client.XClaim(f.ctx, &redis.XClaimArgs{Stream: f.k.stream, Group: "g", Consumer: "c", Messages: []string{id}}).Err())
	}
	f.nack("c", renacked, 2, 2*time.Hour, at, true)
	z, idx := f.holds()
	assert.Len(t, z, 4, "the new hold replaced the old one")
	assert.Equal(t, "10000\x002\x00c", idx["g\x00"+renacked], "the index names the new hold")

	f.stall(moved)
	assert.Equal(t, map[string]int64{moved: 3}, f.reclaim(at), "a stale hold does not keep the entry")
	_, idx = f.holds()
	assert.NotContains(t, idx, "g\x00"+moved, "the stale hold leaves the index")

	require.NoError(t, f.client.XAck(f.ctx, f.k.stream, "g", settled).Err())
	require.NoError(t, f.client.HDel(f.ctx, f.k.held, "g\x00"+missing).Err())
	f.stall(missing)
	res, err := holdScript.Run(f.ctx, f.client, []string{f.k.stream, f.k.hold, f.k.held}, 0, holdBatch).Int64Slice()
	require.NoError(t, err)
	assert.Equal(t, []int64{3, 1}, res, "the promoter visits the three holds left and drops the settled entry's")
	z, idx = f.holds()
	assert.Len(t, z, 2)
	assert.Equal(t, map[string]string{"g\x00" + renacked: "10000\x002\x00c", "g\x00" + missing: "10000\x001\x00a"}, idx,
		"the index keeps the live holds, the one it lacked added back")
	assert.Less(t, f.pending(missing).Idle, at/2, "the promoter refreshed the idle time")
}

// TestReclaimWithoutPromoterNeverHandsOutAHeldNackEarly: through a
// subscription whose promoter is stopped, an entry nacked with a delay
// far past the ack timeout and idle past its lease is not reclaimed, and
// is reclaimed with Attempt 2 once its hold is due.
func TestReclaimWithoutPromoterNeverHandsOutAHeldNackEarly(t *testing.T) {
	is := newInternalSub(t, "hold", 200*time.Millisecond, 5)
	client, b, s, ctx, topic := is.client, is.b, is.s, is.ctx, is.topic
	b.mu.Lock()
	s.ts.stop() // no promoter pass from here on
	b.mu.Unlock()

	require.NoError(t, b.Publish(ctx, topic, []*backend.Message{{ID: "m", Payload: []byte("x")}}))
	var msgs []*backend.Message
	for len(msgs) == 0 {
		var err error
		msgs, err = s.Receive(ctx, 10)
		require.NoError(t, err)
	}
	require.Len(t, msgs, 1)
	require.NoError(t, s.Nack(ctx, msgs[0].AckID, time.Hour))
	id := msgs[0].AckID.(*entryRef).id
	f := &holdFixture{t: t, ctx: ctx, client: client, k: s.keys}
	f.stall(id)
	got, err := s.reclaim(ctx, 10)
	require.NoError(t, err)
	assert.Empty(t, got, "the held entry is not reclaimed before its due time")
	p := f.pending(id)
	assert.EqualValues(t, 1, p.RetryCount, "and no delivery is counted")
	assert.Equal(t, s.consumer, p.Consumer, "it stays with its owner")

	f.moveDue(id, f.serverMs()-1)
	f.stall(id)
	got, err = s.reclaim(ctx, 10)
	require.NoError(t, err)
	require.Len(t, got, 1, "the held entry is reclaimed once due")
	assert.Equal(t, "m", got[0].ID)
	assert.Equal(t, 2, got[0].Attempt, "as the second delivery")
}
