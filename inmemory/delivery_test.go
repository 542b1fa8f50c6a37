package inmemory_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/inmemory"
)

func TestCapabilities(t *testing.T) {
	be := newBackend(t, nil)
	require.Equal(t, backend.Capabilities{
		Name: "mem", ConsumerGroups: true, Redelivery: true, NackDelay: true,
		Ordered: true, StartOldest: true, PublishDedup: true, Extend: true, Scheduling: true,
		Broadcast: true, Results: true,
	}, be.Capabilities(), "capabilities")
}

func TestRoundTripKeepsEveryField(t *testing.T) {
	be := newBackend(t, nil)
	s := subscribe(t, be, "rt", "g")
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	in := &backend.Message{ID: "id-1", Key: "k", Headers: map[string]string{"h": "värde ✓"}, Payload: []byte{0, 1, 0xff}, PublishedAt: at}
	require.NoError(t, be.Publish(context.Background(), "rt", []*backend.Message{in}))
	got := receiveN(t, s, 1, time.Second)[0]
	assert.Equal(t, "id-1", got.ID)
	assert.Equal(t, "k", got.Key)
	assert.Equal(t, map[string]string{"h": "värde ✓"}, got.Headers)
	assert.Equal(t, []byte{0, 1, 0xff}, got.Payload)
	assert.True(t, at.Equal(got.PublishedAt), "PublishedAt kept")
	assert.Equal(t, 1, got.Attempt, "first delivery is attempt 1")
	assert.NotNil(t, got.AckID, "AckID set")
}

func TestPublishCopiesWhatItKeeps(t *testing.T) {
	be := newBackend(t, nil)
	s := subscribe(t, be, "copy", "g")
	h := map[string]string{"a": "1"}
	p := []byte("original")
	require.NoError(t, be.Publish(context.Background(), "copy", []*backend.Message{{ID: "x", Headers: h, Payload: p}}))
	h["a"] = "changed"
	h["b"] = "added"
	copy(p, "CHANGED!")
	got := receiveN(t, s, 1, time.Second)[0]
	assert.Equal(t, map[string]string{"a": "1"}, got.Headers, "headers are copied at publish")
	assert.Equal(t, "original", string(got.Payload), "payload is copied at publish")
	assert.Equal(t, len(got.Payload), cap(got.Payload), "payload capacity is capped so appends cannot touch other entries")
}

func TestReceivedHeadersAreACopyPerDelivery(t *testing.T) {
	be := newBackend(t, nil)
	a := subscribe(t, be, "hdr", "a")
	b := subscribe(t, be, "hdr", "b")
	require.NoError(t, be.Publish(context.Background(), "hdr", []*backend.Message{{ID: "x", Headers: map[string]string{"k": "v"}}}))
	ma := receiveN(t, a, 1, time.Second)[0]
	ma.Headers["k"] = "mutated"
	mb := receiveN(t, b, 1, time.Second)[0]
	assert.Equal(t, "v", mb.Headers["k"], "a handler changing its headers does not affect another group")
}

func TestReceiveReturnsAtMostMaxInPublishOrder(t *testing.T) {
	be := newBackend(t, nil)
	s := subscribe(t, be, "order", "g")
	publish(t, be, "order", "m", 10)
	first, err := s.Receive(context.Background(), 3)
	require.NoError(t, err)
	require.Equal(t, seq("m", 3), ids(first), "first batch is the 3 oldest")
	rest := receiveN(t, s, 7, time.Second)
	assert.Equal(t, seq("m", 10)[3:], ids(rest), "rest in publish order")
}

func TestEveryGroupGetsEveryEntry(t *testing.T) {
	be := newBackend(t, nil)
	a := subscribe(t, be, "fan", "a")
	b := subscribe(t, be, "fan", "b")
	publish(t, be, "fan", "m", 20)
	assert.Equal(t, seq("m", 20), ids(receiveN(t, a, 20, time.Second)), "group a")
	assert.Equal(t, seq("m", 20), ids(receiveN(t, b, 20, time.Second)), "group b")
}

func TestMembersOfAGroupShareEntries(t *testing.T) {
	be := newBackend(t, nil)
	s1 := subscribe(t, be, "share", "g")
	s2 := subscribe(t, be, "share", "g")
	publish(t, be, "share", "m", 10)
	got1, err := s1.Receive(context.Background(), 4)
	require.NoError(t, err)
	got2 := receiveN(t, s2, 6, time.Second)
	all := append(ids(got1), ids(got2)...)
	assert.ElementsMatch(t, seq("m", 10), all, "each entry once across the members")
	assert.Len(t, got1, 4, "first member took what it asked for")
	receiveNone(t, s1, 50*time.Millisecond)
}

func TestStartFromAppliesOnlyToNewGroups(t *testing.T) {
	tests := []struct {
		name string
		from backend.StartFrom
		want []string
	}{
		{name: "oldest gets retained entries", from: backend.StartOldest, want: append(seq("old", 3), seq("new", 2)...)},
		{name: "newest gets only later entries", from: backend.StartNewest, want: seq("new", 2)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			be := newBackend(t, nil)
			keeper := subscribe(t, be, "sf", "keeper") // retains the old entries
			publish(t, be, "sf", "old", 3)
			s := subscribe(t, be, "sf", "g", func(c *backend.SubscribeConfig) { c.StartFrom = tt.from })
			publish(t, be, "sf", "new", 2)
			assert.Equal(t, tt.want, ids(receiveN(t, s, len(tt.want), time.Second)))
			receiveN(t, keeper, 5, time.Second)
		})
	}
}

func TestExistingGroupResumesWhereItStands(t *testing.T) {
	be := newBackend(t, nil)
	s1 := subscribe(t, be, "resume", "g")
	publish(t, be, "resume", "a", 4)
	ackAll(t, s1, receiveN(t, s1, 2, time.Second))
	require.NoError(t, s1.Close())
	publish(t, be, "resume", "b", 1)
	// StartOldest is ignored: the group exists.
	s2 := subscribe(t, be, "resume", "g", oldest)
	assert.Equal(t, []string{"a2", "a3", "b0"}, ids(receiveN(t, s2, 3, time.Second)), "continues after the acked entries")
}

func TestExpiredLeaseRedeliversWithIncrementedAttempt(t *testing.T) {
	be := newBackend(t, nil)
	s := subscribe(t, be, "lease", "g", ackTimeout(50*time.Millisecond))
	publish(t, be, "lease", "m", 1)
	first := receiveN(t, s, 1, time.Second)[0]
	start := time.Now()
	second := receiveN(t, s, 1, 2*time.Second)[0]
	assert.GreaterOrEqual(t, time.Since(start), 40*time.Millisecond, "not redelivered before the lease ends")
	assert.Equal(t, "m0", second.ID)
	assert.Equal(t, 2, second.Attempt, "attempt grows on redelivery")

	// The first delivery's id is stale: acking it still settles the
	// message, which the group had not settled; the newer delivery is
	// settled with it, so its own settlements are stale.
	ackAll(t, s, []*backend.Message{first})
	err := s.Nack(context.Background(), second.AckID, 0)
	require.ErrorIs(t, err, backend.ErrStale, "the newer delivery was settled by the stale ack")
	receiveNone(t, s, 150*time.Millisecond)
}

func TestExpiredLeaseGoesToAnotherMember(t *testing.T) {
	be := newBackend(t, nil)
	dead := subscribe(t, be, "takeover", "g", ackTimeout(50*time.Millisecond))
	live := subscribe(t, be, "takeover", "g", ackTimeout(time.Minute))
	publish(t, be, "takeover", "m", 1)
	receiveN(t, dead, 1, time.Second)
	require.NoError(t, dead.Close(), "member leaves with the entry unacked")
	got := receiveN(t, live, 1, 2*time.Second)[0]
	assert.Equal(t, "m0", got.ID)
	assert.Equal(t, 2, got.Attempt)
}

func TestBlockedReceiveWakesWhenALeaseExpires(t *testing.T) {
	be := newBackend(t, nil)
	holder := subscribe(t, be, "wake-lease", "g", ackTimeout(100*time.Millisecond))
	waiter := subscribe(t, be, "wake-lease", "g", ackTimeout(time.Minute))
	publish(t, be, "wake-lease", "m", 1)
	receiveN(t, holder, 1, time.Second)
	start := time.Now()
	got, err := waiter.Receive(context.Background(), 1)
	require.NoError(t, err)
	require.Len(t, got, 1, "one Receive call gets the expired entry")
	assert.Less(t, time.Since(start), time.Second, "woken by the expiry, not by the one-second limit")
}

func TestNackRedeliversAtOnceWithIncrementedAttempt(t *testing.T) {
	be := newBackend(t, nil)
	s := subscribe(t, be, "nack", "g")
	publish(t, be, "nack", "m", 2)
	got := receiveN(t, s, 2, time.Second)
	require.NoError(t, s.Nack(context.Background(), got[1].AckID, 0))
	again := receiveN(t, s, 1, time.Second)[0]
	assert.Equal(t, "m1", again.ID)
	assert.Equal(t, 2, again.Attempt)
	// Nacking a settled or stale id again is refused and changes nothing.
	require.ErrorIs(t, s.Nack(context.Background(), got[1].AckID, 0), backend.ErrStale, "stale nack")
	require.Error(t, s.Nack(context.Background(), "not-an-ack-id", 0), "unknown nack")
	ackAll(t, s, []*backend.Message{got[0], again})
	receiveNone(t, s, 50*time.Millisecond)
}

func TestNackDelayIsHeldAndOrderedByDueTime(t *testing.T) {
	be := newBackend(t, nil)
	s := subscribe(t, be, "delay", "g")
	publish(t, be, "delay", "m", 2)
	got := receiveN(t, s, 2, time.Second)
	start := time.Now()
	require.NoError(t, s.Nack(context.Background(), got[0].AckID, 300*time.Millisecond))
	require.NoError(t, s.Nack(context.Background(), got[1].AckID, 100*time.Millisecond))

	first := receiveN(t, s, 1, 2*time.Second)[0]
	assert.Equal(t, "m1", first.ID, "shorter delay comes back first")
	assert.GreaterOrEqual(t, time.Since(start), 100*time.Millisecond, "held for its delay")
	second := receiveN(t, s, 1, 2*time.Second)[0]
	assert.Equal(t, "m0", second.ID)
	assert.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond, "held for its delay")
	assert.Equal(t, 2, second.Attempt)
	st, _ := be.Stats("delay")
	assert.Equal(t, 0, st.Groups[0].Delayed, "nothing left delayed")
}

func TestAckIsIdempotentAndIgnoresUnknownIDs(t *testing.T) {
	be := newBackend(t, nil)
	s := subscribe(t, be, "ack", "g", ackTimeout(50*time.Millisecond))
	publish(t, be, "ack", "m", 3)
	got := receiveN(t, s, 3, time.Second)
	ackAll(t, s, got)
	ackAll(t, s, got)
	require.NoError(t, s.Ack(context.Background(), []backend.AckID{nil, 42, "x"}), "unknown ids")
	receiveNone(t, s, 150*time.Millisecond) // leases would have expired by now
	st, ok := be.Stats("ack")
	require.True(t, ok)
	assert.Equal(t, 0, st.Backlog, "every entry settled once")
}

func TestAckFromAnotherTopicIsIgnored(t *testing.T) {
	be := newBackend(t, nil)
	a := subscribe(t, be, "ta", "g", ackTimeout(50*time.Millisecond))
	b := subscribe(t, be, "tb", "g")
	publish(t, be, "ta", "m", 1)
	got := receiveN(t, a, 1, time.Second)
	ackAll(t, b, got)
	again := receiveN(t, a, 1, time.Second)[0]
	assert.Equal(t, 2, again.Attempt, "an id acked on the wrong topic's subscription stays pending")
}

func TestExtendPostponesExpiry(t *testing.T) {
	be := newBackend(t, nil)
	s := subscribe(t, be, "extend", "g", ackTimeout(300*time.Millisecond))
	ext := s.(backend.Extender)
	publish(t, be, "extend", "m", 1)
	got := receiveN(t, s, 1, time.Second)[0]
	stop := time.Now().Add(700 * time.Millisecond) // well past the ack timeout
	for time.Now().Before(stop) {
		require.NoError(t, ext.Extend(context.Background(), got.AckID), "extend an active lease")
		receiveNone(t, s, 30*time.Millisecond)
	}
	ackAll(t, s, []*backend.Message{got})
	err := ext.Extend(context.Background(), got.AckID)
	require.ErrorIs(t, err, backend.ErrStale, "extend after ack")
}

func TestDeadLetterMovesAndSettlesInOneStep(t *testing.T) {
	be := newBackend(t, nil)
	s := subscribe(t, be, "orders", "g", ackTimeout(50*time.Millisecond))
	dlq := subscribe(t, be, "orders.dlq", "ops")
	publish(t, be, "orders", "m", 1)
	got := receiveN(t, s, 1, time.Second)[0]
	cp := &backend.Message{ID: got.ID, Headers: map[string]string{"reason": "bad"}, Payload: got.Payload}
	dl := s.(backend.DeadLetterer)
	require.NoError(t, dl.DeadLetter(context.Background(), got.AckID, "orders.dlq", cp))
	moved := receiveN(t, dlq, 1, time.Second)[0]
	assert.Equal(t, "m0", moved.ID)
	assert.Equal(t, "bad", moved.Headers["reason"])
	receiveNone(t, s, 150*time.Millisecond) // the original is settled
	// A second dead-letter of the same delivery is stale and writes nothing.
	require.ErrorIs(t, dl.DeadLetter(context.Background(), got.AckID, "orders.dlq", cp), backend.ErrStale)
	receiveNone(t, dlq, 50*time.Millisecond)
}

func TestConcurrentPublishersAndMembersLoseNothing(t *testing.T) {
	be := newBackend(t, &inmemory.Options{MaxBacklog: 500})
	const pubs, batches, size = 4, 50, 20
	total := pubs * batches * size
	members := []backend.Subscription{subscribe(t, be, "stress", "g"), subscribe(t, be, "stress", "g")}
	var mu sync.Mutex
	seen := map[string]int{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for _, m := range members {
		wg.Go(func() {
			for ctx.Err() == nil {
				got, err := m.Receive(ctx, 32)
				if err != nil {
					return
				}
				mu.Lock()
				for _, g := range got {
					seen[g.ID]++
				}
				mu.Unlock()
				ackAll(t, m, got)
			}
		})
	}
	var pwg sync.WaitGroup
	for p := range pubs {
		pwg.Go(func() {
			for b := range batches {
				assert.NoError(t, be.Publish(ctx, "stress", msgs(fmt.Sprintf("p%d-b%d-", p, b), size)))
			}
		})
	}
	pwg.Wait()
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == total
	}, 5*time.Second, 5*time.Millisecond, "every message received")
	cancel()
	wg.Wait()
	for id, n := range seen {
		require.Equal(t, 1, n, "message %s received once", id)
	}
}

// A batch's payloads share one allocation: each comes back byte-exact,
// nil stays nil and empty stays empty (a lone empty payload too), and
// appending to one never reaches the next.
func TestPayloadsOfABatchComeBackExactAndApart(t *testing.T) {
	be := newBackend(t, nil)
	s := subscribe(t, be, "pl", "g")
	payloads := [][]byte{[]byte("first"), nil, {}, []byte("fourth"), bytes.Repeat([]byte{0, 0xff}, 300)}
	batch := make([]*backend.Message, len(payloads))
	for i, p := range payloads {
		batch[i] = &backend.Message{ID: fmt.Sprintf("p%d", i), Payload: p}
	}
	require.NoError(t, be.Publish(context.Background(), "pl", batch))
	require.NoError(t, be.Publish(context.Background(), "pl", []*backend.Message{{ID: "lone", Payload: []byte{}}}))
	got := receiveN(t, s, len(payloads)+1, time.Second)
	for i, p := range payloads {
		assert.Equal(t, p, got[i].Payload, "payload %d", i)
		assert.Equal(t, p == nil, got[i].Payload == nil, "payload %d is nil exactly when it was published nil", i)
		assert.Equal(t, len(p), cap(got[i].Payload), "payload %d is capped to its length", i)
	}
	assert.NotNil(t, got[len(payloads)].Payload, "a lone empty payload stays empty, not nil")
	assert.Empty(t, got[len(payloads)].Payload)
	_ = append(got[0].Payload, "XXXXXXXX"...)
	assert.Equal(t, []byte("fourth"), got[3].Payload, "appending to one payload leaves the others")
}
