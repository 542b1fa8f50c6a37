package conformance

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	bus "github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/testkit/crashtest"
)

// keyed returns perKey messages for each of keys, interleaved in publish
// order (k0-0, k1-0, ..., k0-1, ...); payload "<key>/<seq>".
func keyed(keys, perKey int) []*bus.Message {
	msgs := make([]*bus.Message, 0, keys*perKey)
	for i := range perKey {
		for k := range keys {
			key := fmt.Sprintf("k%d", k)
			msgs = append(msgs, &bus.Message{Key: key, Payload: fmt.Appendf(nil, "%s/%d", key, i)})
		}
	}
	return msgs
}

// keyLog records, per key, the payloads handled in order and whether two
// handlers of one key ever overlapped.
type keyLog struct {
	mu          sync.Mutex
	order       map[string][]string
	running     map[string]int
	overlap     []string
	redelivered []string // payloads that came with an Attempt above 1
	total       atomic.Int64
}

func newKeyLog() *keyLog {
	return &keyLog{order: map[string][]string{}, running: map[string]int{}}
}

func (l *keyLog) start(d *bus.Delivery) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.running[d.Key]++; l.running[d.Key] > 1 {
		l.overlap = append(l.overlap, string(d.Payload))
	}
	if d.Attempt > 1 {
		l.redelivered = append(l.redelivered, string(d.Payload))
	}
}

func (l *keyLog) end(d *bus.Delivery, handled bool) {
	l.mu.Lock()
	l.running[d.Key]--
	if handled {
		l.order[d.Key] = append(l.order[d.Key], string(d.Payload))
	}
	l.mu.Unlock()
	if handled {
		l.total.Add(1)
	}
}

// assertInOrder checks that every key's messages were handled once each,
// in publish order, never two at once.
func (l *keyLog) assertInOrder(t *testing.T, msgs []*bus.Message) {
	t.Helper()
	want := map[string][]string{}
	for _, m := range msgs {
		want[m.Key] = append(want[m.Key], string(m.Payload))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	assert.Empty(t, l.overlap, "two handlers of one key ran at once")
	for key, w := range want {
		assert.Equal(t, w, l.order[key], "key %s: handled in publish order, once each", key)
	}
}

// assertInOrderUnlessLeaseLost is assertInOrder for a case whose handlers
// never fail and whose members never die, where a delivery may still come
// again with an Attempt above 1: its lease ran out while it waited (a
// starved process), or a member handing a partition over returned it
// counted. Key order is not promised for such a delivery
// (docs/ordering.md), so the case checks that every message was handled
// and that the others, the ones that came once at attempt 1, were
// handled in publish order, once each.
func (l *keyLog) assertInOrderUnlessLeaseLost(t *testing.T, msgs []*bus.Message) {
	t.Helper()
	l.mu.Lock()
	again := map[string]bool{}
	for _, p := range l.redelivered {
		again[p] = true
	}
	l.mu.Unlock()
	if len(again) == 0 {
		l.assertInOrder(t, msgs)
		return
	}
	t.Logf("%d deliveries came again with an Attempt above 1 (%v): the order of the others is checked", len(again), slices.Sorted(maps.Keys(again)))
	want := map[string][]string{}
	for _, m := range msgs {
		if !again[string(m.Payload)] {
			want[m.Key] = append(want[m.Key], string(m.Payload))
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range msgs {
		assert.Contains(t, l.order[m.Key], string(m.Payload), "key %s: every message handled", m.Key)
	}
	for key, w := range want {
		got := slices.DeleteFunc(slices.Clone(l.order[key]), func(p string) bool { return again[p] })
		assert.Equal(t, w, got, "key %s: the messages that came once handled in publish order, once each", key)
	}
}

// testKeyOrderOneMember: with WithKeyOrdering, the messages of a key are
// handled one at a time in publish order, while different keys run in
// parallel.
func testKeyOrderOneMember(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic, group := h.topic("keyorder"), h.group("keyorder")
	msgs := keyed(8, count(25, 8))
	log := newKeyLog()
	// The first handler of k0 waits until a handler of another key runs:
	// proof that keys run in parallel.
	parallel := make(chan struct{})
	var once sync.Once
	h.subscribe(context.Background(), topic, func(ctx context.Context, d *bus.Delivery) error {
		log.start(d)
		if d.Key != "k0" {
			once.Do(func() { close(parallel) })
		} else if string(d.Payload) == "k0/0" {
			select {
			case <-parallel:
			case <-ctx.Done():
			}
		}
		log.end(d, true)
		return nil
	}, bus.WithGroup(group), bus.WithKeyOrdering(), bus.WithMaxInFlight(16), bus.WithAckTimeout(s.longLease()))
	h.publish(topic, msgs...)
	s.eventually(t, func() bool { return log.total.Load() >= int64(len(msgs)) }, "every keyed message handled")
	log.assertInOrder(t, msgs)
	select {
	case <-parallel:
	default:
		t.Error("no two keys ran at once")
	}
}

// testKeyOrderRetryHoldsOnlyItsKey: a failing message holds back the
// later messages of its key until its retry succeeds, and nothing of the
// other keys; a message dead-lettered as rejected releases its key.
func testKeyOrderRetryHoldsOnlyItsKey(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic, group := h.topic("keyretry"), h.group("keyretry")
	msgs := []*bus.Message{
		{Key: "a", Payload: []byte("a/0")}, {Key: "b", Payload: []byte("b/0")},
		{Key: "a", Payload: []byte("a/1")}, {Key: "b", Payload: []byte("b/1")},
		{Key: "c", Payload: []byte("c/0")}, {Key: "c", Payload: []byte("c/1")},
		{Key: "a", Payload: []byte("a/2")}, {Key: "b", Payload: []byte("b/2")},
	}
	log := newKeyLog()
	bDone := make(chan struct{})
	var bCount atomic.Int64
	var aAttempts []int
	var mu sync.Mutex
	h.subscribe(context.Background(), topic, func(ctx context.Context, d *bus.Delivery) error {
		log.start(d)
		switch string(d.Payload) {
		case "a/0":
			mu.Lock()
			aAttempts = append(aAttempts, d.Attempt)
			mu.Unlock()
			// Fails until every b was handled: b is never held back by a.
			select {
			case <-bDone:
			default:
				log.end(d, false)
				return errors.New("not yet")
			}
			if d.Attempt < 3 {
				log.end(d, false)
				return errors.New("one more time")
			}
		case "c/0":
			log.end(d, false)
			return bus.Reject(errors.New("c/0 is poison"))
		}
		if d.Key == "b" && bCount.Add(1) == 3 {
			close(bDone)
		}
		log.end(d, true)
		return nil
	}, bus.WithGroup(group), bus.WithKeyOrdering(), bus.WithMaxInFlight(8),
		bus.WithMaxDeliveries(100), bus.WithDeadLetter(topic+".dlq"), fastRetry(), bus.WithAckTimeout(s.longLease()))
	h.publish(topic, msgs...)
	want := []*bus.Message{msgs[0], msgs[1], msgs[2], msgs[3], msgs[5], msgs[6], msgs[7]} // c/0 dead-lettered
	s.eventually(t, func() bool { return log.total.Load() >= int64(len(want)) }, "every message but the poison one handled")
	log.assertInOrder(t, want)
	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, aAttempts)
	for i, a := range aAttempts {
		assert.Equal(t, i+1, a, "a/0's attempts count up: %v", aAttempts)
	}
}

// testKeyOrderAcrossClose: a key-ordered member closes while a key's head
// runs and the rest of the key waits behind it. Whatever the closing
// member still handles while it drains, and whatever it gives back to the
// group, the next member takes it from there: every message of the key
// is handled once, in publish order, on its first attempt.
func testKeyOrderAcrossClose(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic, group := h.topic("keyclose"), h.group("keyclose")
	msgs := keyed(2, 4)
	log := newKeyLog()
	attempts := make(chan int, 32)
	handle := func(d *bus.Delivery) {
		log.start(d)
		log.end(d, true)
		trySend(attempts, d.Attempt)
	}
	started, finish := make(chan struct{}), make(chan struct{})
	var once sync.Once
	first := h.subscribe(context.Background(), topic, func(ctx context.Context, d *bus.Delivery) error {
		if string(d.Payload) == "k0/0" {
			once.Do(func() { close(started) })
			<-finish
		}
		handle(d)
		return nil
	}, bus.WithGroup(group), bus.WithKeyOrdering(), bus.WithMaxInFlight(16), bus.WithAckTimeout(s.longLease()))
	h.publish(topic, msgs...)
	recv(t, s, started, "k0/0 running")
	closed := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), s.deadline())
		defer cancel()
		closed <- first.Close(ctx)
	}()
	close(finish) // the head finishes while the subscription closes
	require.NoError(t, recv(t, s, closed, "the first member's Close"))

	h.subscribe(context.Background(), topic, func(ctx context.Context, d *bus.Delivery) error {
		handle(d)
		return nil
	}, bus.WithGroup(group), bus.WithKeyOrdering(), bus.WithMaxInFlight(16), bus.WithAckTimeout(s.longLease()))
	s.eventually(t, func() bool { return log.total.Load() >= int64(len(msgs)) }, "every message handled by one member or the other")
	log.assertInOrder(t, msgs)
	for range len(msgs) {
		assert.Equal(t, 1, <-attempts, "given back without counting an attempt")
	}
}

// keyOwners skips the case unless the members of a key-ordered group
// keep each key on one member at a time: through the group lock
// (backend.GroupLocker) or through the backend's own assignment
// (Capabilities.KeyOwnership).
func (h *harness) keyOwners(t *testing.T) {
	t.Helper()
	if h.s.caps.KeyOwnership {
		return
	}
	h.locker(t)
}

// crashHandover skips the case unless the backend has a group lock: a
// crashtest.Member's keys pass to the others when it stops renewing the
// group lock. A backend whose own assignment keeps the keys
// (KeyOwnership) hands a member's keys over when its broker stops
// hearing from the member's client, which crashtest does not stop; such
// a backend proves its crash handover in its own tests.
func (h *harness) crashHandover(t *testing.T) {
	t.Helper()
	if _, ok := h.be.Backend.(backend.GroupLocker); !ok && h.s.caps.KeyOwnership {
		t.Skipf("%s does not implement backend.GroupLocker: its keys move by its own group assignment (KeyOwnership) when the broker stops hearing from a member, which crashtest cannot stop", h.s.caps.Name)
	}
	h.locker(t)
}

// locker returns the backend's group lock, or skips the case.
func (h *harness) locker(t *testing.T) backend.GroupLocker {
	t.Helper()
	l, ok := h.be.Backend.(backend.GroupLocker)
	if !ok {
		t.Skipf("%s does not implement backend.GroupLocker", h.s.caps.Name)
	}
	return l
}

// testGroupLock: one holder at a time; the holder renews; an unlocked
// lock goes to the next holder without a takeover; a lock its holder let
// lapse goes to the next with a takeover, and the old holder cannot renew
// it any more.
func testGroupLock(t *testing.T, s *suite) {
	h := s.newHarness(t)
	l := h.locker(t)
	topic, group := h.topic("lock"), h.group("lock")
	ctx, cancel := context.WithTimeout(context.Background(), s.deadline())
	defer cancel()
	ttl := s.ackTimeout()
	lock := func(holder string) (bool, bool) {
		t.Helper()
		held, takeover, err := l.LockGroup(ctx, topic, group, holder, ttl)
		require.NoError(t, err, "lock for %s", holder)
		return held, takeover
	}
	if _, _, err := l.LockGroup(ctx, topic, group, "a", ttl); errors.Is(err, bus.ErrUnsupported) {
		t.Skipf("%s has no group lock in this mode: %v", s.caps.Name, err)
	}
	held, takeover := lock("a")
	require.True(t, held, "a free lock is taken")
	assert.False(t, takeover, "a lock never held is no takeover")
	held, _ = lock("b")
	assert.False(t, held, "b cannot take a's lock")
	held, _ = lock("a")
	assert.True(t, held, "a renews its lock")
	require.NoError(t, l.UnlockGroup(ctx, topic, group, "b"), "an unlock by a non-holder changes nothing")
	held, _ = lock("b")
	assert.False(t, held, "still a's")

	require.NoError(t, l.UnlockGroup(ctx, topic, group, "a"))
	held, takeover = lock("b")
	require.True(t, held, "an unlocked lock goes to the next holder")
	assert.False(t, takeover, "after an unlock: no takeover")

	// b lets it lapse; c takes it over after the ttl.
	s.eventually(t, func() bool {
		held, takeover = lock("c")
		return held
	}, "the lapsed lock is taken")
	assert.True(t, takeover, "a lock its holder let lapse is a takeover")
	held, _ = lock("b")
	assert.False(t, held, "the old holder cannot renew a lock taken over")
}

// testKeyOrderOneActiveMember: with a group lock, one member of a
// key-ordered group consumes at a time, and with KeyOwnership one member
// at a time handles a key; when it closes, the next takes over and every
// key stays in publish order across the two.
func testKeyOrderOneActiveMember(t *testing.T, s *suite) {
	h := s.newHarness(t)
	h.keyOwners(t)
	topic, group := h.topic("keymembers"), h.group("keymembers")
	log := newKeyLog()
	var mu sync.Mutex
	by := map[string]map[int]bool{} // key -> members that handled it
	member := func(id int) bus.Handler {
		return func(ctx context.Context, d *bus.Delivery) error {
			log.start(d)
			mu.Lock()
			if by[d.Key] == nil {
				by[d.Key] = map[int]bool{}
			}
			by[d.Key][id] = true
			mu.Unlock()
			log.end(d, true)
			return nil
		}
	}
	// Every message is handled once (see assertInOrder): a lease of
	// four short ones, which a loaded machine's ack does not outlive;
	// the next member may wait for it after the first closes.
	opts := []bus.SubscribeOption{bus.WithGroup(group), bus.WithKeyOrdering(), bus.WithMaxInFlight(8), bus.WithAckTimeout(4 * s.ackTimeout())}
	first := h.subscribe(context.Background(), topic, member(1), opts...)
	h.subscribe(context.Background(), topic, member(2), opts...)
	batch1 := keyed(6, count(10, 4))
	h.publish(topic, batch1...)
	s.eventually(t, func() bool { return log.total.Load() >= int64(len(batch1)) }, "the first batch handled")
	mu.Lock()
	for key, ms := range by {
		assert.Len(t, ms, 1, "key %s handled by one member while both ran", key)
	}
	firstRan := by["k0"][1]
	mu.Unlock()
	if !firstRan {
		t.Log("the second member handled k0")
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.deadline())
	defer cancel()
	require.NoError(t, first.Close(ctx), "close the first member")

	batch2 := keyed(6, count(10, 4))
	for _, m := range batch2 {
		m.Payload = append([]byte("2:"), m.Payload...)
	}
	h.publish(topic, batch2...)
	s.eventually(t, func() bool { return log.total.Load() >= int64(len(batch1)+len(batch2)) }, "the second batch handled by the member left")
	log.assertInOrder(t, append(batch1, batch2...))
}

// hotKey returns n messages of the key "hot" (payload "hot/<seq>") and,
// after them in publish order, perKey messages of each of keys other
// keys (see keyed).
func hotKey(n, keys, perKey int) (hot, others []*bus.Message) {
	for i := range n {
		hot = append(hot, &bus.Message{Key: "hot", Payload: fmt.Appendf(nil, "hot/%d", i)})
	}
	return hot, keyed(keys, perKey)
}

// othersDone counts the handled messages of the keys other than "hot"
// and is closed once all of them were.
type othersDone struct {
	want    int64
	handled atomic.Int64
	ch      chan struct{}
}

func newOthersDone(n int) *othersDone { return &othersDone{want: int64(n), ch: make(chan struct{})} }

func (o *othersDone) handledOne() {
	if o.handled.Add(1) == o.want {
		close(o.ch)
	}
}

func (o *othersDone) done() bool {
	select {
	case <-o.ch:
		return true
	default:
		return false
	}
}

// testKeyOrderHotKeyLeavesOtherKeysRunning: a key with many more messages
// than MaxInFlight queued ahead of the other keys, whose head runs until
// the others are done, never stops them: the deliveries waiting for their
// key take no in-flight slot, and the subscription fetches past them.
func testKeyOrderHotKeyLeavesOtherKeysRunning(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic, group := h.topic("keyhot"), h.group("keyhot")
	hot, others := hotKey(count(60, 24), 6, 4)
	log := newKeyLog()
	done := newOthersDone(len(others))
	var headSawOthers atomic.Bool
	h.subscribe(context.Background(), topic, func(ctx context.Context, d *bus.Delivery) error {
		log.start(d)
		switch {
		case d.Key != "hot":
			done.handledOne()
		case string(d.Payload) == "hot/0":
			// Runs until every other key's message was handled, or
			// gives up after half the deadline (the case then fails).
			timer := time.NewTimer(s.deadline() / 2)
			select {
			case <-done.ch:
				headSawOthers.Store(true)
			case <-timer.C:
			case <-ctx.Done():
			}
			timer.Stop()
		}
		log.end(d, true)
		return nil
	}, bus.WithGroup(group), bus.WithKeyOrdering(), bus.WithMaxInFlight(4), bus.WithAckTimeout(s.longLease()))
	h.publish(topic, hot...)
	h.publish(topic, others...)
	s.eventually(t, func() bool { return log.total.Load() >= int64(len(hot)+len(others)) }, "every message handled")
	assert.True(t, headSawOthers.Load(), "the %d messages of the other keys were all handled while the hot key's head ran and %d of its messages waited behind it (MaxInFlight 4)", len(others), len(hot)-1)
	log.assertInOrder(t, append(hot, others...))
}

// testKeyOrderRetryingHeadLeavesOtherKeysRunning: a head that fails and
// is retried again and again, with more messages of its key behind it
// than MaxInFlight, holds back its key only: the other keys, published
// after it, are all handled before its retry succeeds, and the rest of
// its key still runs after the retry, in order.
func testKeyOrderRetryingHeadLeavesOtherKeysRunning(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic, group := h.topic("keyhotretry"), h.group("keyhotretry")
	hot, others := hotKey(1+count(20, 8), 6, 4)
	log := newKeyLog()
	done := newOthersDone(len(others))
	var headSawOthers atomic.Bool
	var attempts atomic.Int64
	var first atomic.Int64 // when hot/0 first ran (UnixNano)
	h.subscribe(context.Background(), topic, func(ctx context.Context, d *bus.Delivery) error {
		log.start(d)
		switch {
		case d.Key != "hot":
			done.handledOne()
		case string(d.Payload) == "hot/0":
			n := attempts.Add(1)
			first.CompareAndSwap(0, time.Now().UnixNano())
			// Fails on its first attempt and until every other key's
			// message was handled, or gives up after half the deadline
			// (the case then fails).
			if n > 1 && done.done() {
				headSawOthers.Store(true)
			} else if time.Since(time.Unix(0, first.Load())) < s.deadline()/2 {
				log.end(d, false)
				return bus.Nack(errors.New("not yet"), 20*time.Millisecond)
			}
		}
		log.end(d, true)
		return nil
	}, bus.WithGroup(group), bus.WithKeyOrdering(), bus.WithMaxInFlight(4), bus.WithMaxDeliveries(10_000),
		bus.WithDeadLetter(topic+".dlq"), fastRetry(), bus.WithAckTimeout(s.longLease()))
	h.publish(topic, hot...)
	h.publish(topic, others...)
	s.eventually(t, func() bool { return log.total.Load() >= int64(len(hot)+len(others)) }, "every message handled")
	assert.True(t, headSawOthers.Load(), "the %d messages of the other keys were all handled while the hot key's head was retried (%d attempts) with %d messages behind it (MaxInFlight 4)", len(others), attempts.Load(), len(hot)-1)
	assert.Greater(t, attempts.Load(), int64(1), "the hot key's head was retried")
	log.assertInOrder(t, append(hot, others...))
}

// testKeyOrderHotKeyLedger: the ledger of a key-ordered group with one
// hot key. Hundreds of messages of the hot key are queued ahead of the
// other keys, and its head fails twice, with a retry delay of 3 s and
// then 500 ms (scaled by WithTimeScale, as every delay of the suite is);
// every handler works a millisecond, four at a time. The other keys all
// finish before the hot key does, and start while its head waits for its
// first retry (a window wide enough for a loaded machine, where reaching
// the other keys past the hot key's backlog took up to 2 s); no message
// is lost, none handled out of its key's order. The figures are logged.
func testKeyOrderHotKeyLedger(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic, group := h.topic("keyledger"), h.group("keyledger")
	firstDelay, retryDelay := s.cfg.dur(3*time.Second), s.cfg.dur(500*time.Millisecond)
	hot, others := hotKey(count(300, 60), 16, count(20, 5))
	all := append(append([]*bus.Message(nil), hot...), others...)
	log := newKeyLog()
	var mu sync.Mutex
	finished := map[string]time.Time{} // payload -> when handled
	var othersStarted atomic.Int64
	var startedBeforeRetry atomic.Int64 // other keys' messages started before hot/0's first retry
	var attempts atomic.Int64
	// The head's first attempt waits until every message is published,
	// so that its retry delay counts from there.
	published := make(chan struct{})
	h.subscribe(context.Background(), topic, func(ctx context.Context, d *bus.Delivery) error {
		log.start(d)
		if d.Key != "hot" {
			othersStarted.Add(1)
		}
		if string(d.Payload) == "hot/0" {
			select {
			case <-published:
			case <-ctx.Done():
			}
			if attempts.Add(1) == 2 {
				startedBeforeRetry.Store(othersStarted.Load())
			}
			if d.Attempt < 3 {
				log.end(d, false)
				delay := retryDelay
				if d.Attempt == 1 {
					delay = firstDelay
				}
				return bus.Nack(errors.New("the head fails twice"), delay)
			}
		}
		time.Sleep(time.Millisecond) // the handler's work
		mu.Lock()
		finished[string(d.Payload)] = time.Now()
		mu.Unlock()
		log.end(d, true)
		return nil
	}, bus.WithGroup(group), bus.WithKeyOrdering(), bus.WithMaxInFlight(4), bus.WithMaxDeliveries(10),
		bus.WithDeadLetter(topic+".dlq"), bus.WithAckTimeout(s.longLease()))
	h.publish(topic, hot...)
	h.publish(topic, others...)
	start := time.Now()
	close(published)
	lost := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(all) - len(finished)
	}
	s.eventually(t, func() bool { return lost() == 0 }, "every message handled (lost %d)", lost())
	log.assertInOrder(t, all)

	mu.Lock()
	defer mu.Unlock()
	var othersLast, hotLast time.Duration
	for _, m := range others {
		othersLast = max(othersLast, finished[string(m.Payload)].Sub(start))
	}
	for _, m := range hot {
		hotLast = max(hotLast, finished[string(m.Payload)].Sub(start))
	}
	violations := 0
	for _, got := range log.order {
		for i := 1; i < len(got); i++ {
			if seqOf(got[i]) < seqOf(got[i-1]) {
				violations++
			}
		}
	}
	t.Logf("hot key: %d messages queued ahead, head failed twice (retry after %v, then %v); other keys: %d messages of %d keys; MaxInFlight 4",
		len(hot), firstDelay, retryDelay, len(others), 16)
	t.Logf("since the last publish: other keys finished after %v; hot key finished after %v; %d other-key messages started before the head's first retry; order violations %d; lost %d",
		othersLast.Round(time.Millisecond), hotLast.Round(time.Millisecond), startedBeforeRetry.Load(), violations, len(all)-len(finished))
	assert.Equal(t, int64(3), attempts.Load(), "the hot key's head ran three times")
	assert.Positive(t, startedBeforeRetry.Load(), "other keys started while the hot key's head waited for its retry")
	assert.Less(t, othersLast, hotLast, "the other keys finished before the hot key")
	assert.Zero(t, violations, "order violations")
}

// seqOf is the sequence number of a "<key>/<seq>" payload.
func seqOf(payload string) int {
	_, seq, _ := strings.Cut(payload, "/")
	n, _ := strconv.Atoi(seq)
	return n
}

// testKeyOrderAcrossLeaveAndJoin: members of a key-ordered group come and
// go gracefully while messages flow, as in a rolling deploy: the member
// that handles the messages closes (Subscription.Close, then its Bus's
// Close) while a new one joins, several times. What a leaving member held
// is back with the group before the next member fetches: no message of
// a key is handled before an earlier one of the key completed, none is
// handled again after a later one completed, and nothing is lost.
func testKeyOrderAcrossLeaveAndJoin(t *testing.T, s *suite) {
	h := s.newHarness(t)
	h.keyOwners(t)
	runLeaveJoin(t, s, h, h.topic("leavejoin"), 1)
}

// testPartitionedKeyOrderAcrossLeaveAndJoin: the same on a topic of 4
// partitions, whose owners change at every leave and join.
func testPartitionedKeyOrderAcrossLeaveAndJoin(t *testing.T, s *suite) {
	h := s.newHarness(t)
	h.partitionOwnership(t)
	topic := h.partitionedTopic(t, "leavejoinparts", 4)
	runLeaveJoin(t, s, h, topic, 4)
}

// leaveJoinLog checks the per-key order of a run of runLeaveJoin as
// handlers start and finish. Safe for concurrent use.
type leaveJoinLog struct {
	mu         sync.Mutex
	done       map[string]int          // per key: how many of its first messages completed
	finished   map[string]map[int]bool // per key: the seqs that completed
	violations []string
	handled    atomic.Int64 // distinct messages completed
	last       atomic.Int64 // the member that started a delivery last
}

// start checks a delivery of seq of key as its handler starts: every
// earlier message of the key has completed, and no later one has (the
// head of a key may run again: a redelivery).
func (l *leaveJoinLog) start(member int, key string, seq int) {
	l.last.Store(int64(member))
	l.mu.Lock()
	defer l.mu.Unlock()
	done := l.done[key]
	switch {
	case seq > done:
		l.violations = append(l.violations, fmt.Sprintf("%s/%d started by member %d before %s/%d completed", key, seq, member, key, done))
	case seq < done-1:
		l.violations = append(l.violations, fmt.Sprintf("%s/%d started again by member %d after %s/%d completed", key, seq, member, key, done-1))
	}
}

// end records that seq of key completed.
func (l *leaveJoinLog) end(key string, seq int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f := l.finished[key]
	if f == nil {
		f = map[int]bool{}
		l.finished[key] = f
	}
	if f[seq] {
		return
	}
	f[seq] = true
	l.handled.Add(1)
	for f[l.done[key]] {
		l.done[key]++
	}
}

// leaveJoinAckTimeout is the ack timeout of runLeaveJoin's members: no
// lease runs out while a loaded machine stalls a member (a lease that
// runs out may legitimately reorder a key), and a held message that
// comes back only after it still shows as the later messages of its key
// start before it.
const leaveJoinAckTimeout = 5 * time.Second

// runLeaveJoin runs the leave-and-join rounds on topic (of partitions
// partitions): two members at a time, each with a Bus of its own over the
// harness's backend; a publisher sends a message to every key every few
// milliseconds; each round closes the member that started a delivery
// last, once it has handled some, and a new member joins.
func runLeaveJoin(t *testing.T, s *suite, h *harness, topic string, partitions int) {
	group := h.group("leavejoin")
	keys, rounds := 8, count(4, 3)
	log := &leaveJoinLog{done: map[string]int{}, finished: map[string]map[int]bool{}}
	log.last.Store(-1)
	type member struct {
		b       *bus.Bus
		sub     *bus.Subscription
		handled atomic.Int64
	}
	var members []*member
	join := func() {
		id := len(members)
		m := &member{b: bus.New(crashtest.New(h.be), bus.WithObserver(h.events))}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), s.cfg.dur(closeTimeout))
			defer cancel()
			_ = m.b.Close(ctx) // a member closed in the run reports ErrClosed
		})
		sub, err := m.b.Subscribe(context.Background(), topic, func(_ context.Context, d *bus.Delivery) error {
			key, seq := d.Key, seqOf(string(d.Payload))
			log.start(id, key, seq)
			m.handled.Add(1)
			log.end(key, seq)
			return nil
		}, bus.WithGroup(group), bus.WithKeyOrdering(), bus.WithMaxInFlight(4), bus.WithAckTimeout(s.cfg.dur(leaveJoinAckTimeout)))
		require.NoError(t, err, "member %d joins", id)
		m.sub = sub
		members = append(members, m)
	}
	join()
	join()

	// The publisher sends one message to every key per tick until the
	// rounds are over.
	stop := make(chan struct{})
	published := make(chan int, 1)
	var perKey int
	end := sync.OnceFunc(func() {
		close(stop)
		perKey = <-published
	})
	defer end()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 4*s.deadline())
		defer cancel()
		tick := time.NewTicker(s.cfg.dur(10 * time.Millisecond))
		defer tick.Stop()
		n := 0
		defer func() { published <- n }()
		for {
			batch := make([]*bus.Message, 0, keys)
			for k := range keys {
				key := fmt.Sprintf("k%d", k)
				batch = append(batch, &bus.Message{Key: key, Payload: fmt.Appendf(nil, "%s/%d", key, n)})
			}
			if err := h.bus.Publish(ctx, topic, batch...); err != nil {
				t.Errorf("publish %s/%d: %v", "k*", n, err)
				return
			}
			n++
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()

	closed := map[int]bool{}
	for round := range rounds {
		// The member to close is one that handles messages now.
		var leaving int
		s.eventually(t, func() bool {
			leaving = int(log.last.Load())
			return leaving >= 0 && !closed[leaving] && members[leaving].handled.Load() >= 16
		}, "round %d: a live member handles messages", round)
		m := members[leaving]
		closed[leaving] = true
		join()
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.dur(closeTimeout))
		require.NoError(t, m.sub.Close(ctx), "round %d: member %d leaves", round, leaving)
		require.NoError(t, m.b.Close(ctx), "round %d: member %d's bus closes", round, leaving)
		cancel()
	}
	end()
	want := int64(keys * perKey)
	require.Eventually(t, func() bool { return log.handled.Load() >= want }, 2*s.deadline(), pollInterval, "every message handled")

	log.mu.Lock()
	defer log.mu.Unlock()
	for k := range keys {
		key := fmt.Sprintf("k%d", k)
		assert.Equal(t, perKey, log.done[key], "key %s: every message handled, in order", key)
	}
	assert.Empty(t, log.violations[:min(len(log.violations), 8)], "no message of a key handled out of its publish order across a leave or a join (%d violations, the first shown)", len(log.violations))
	t.Logf("leave and join: %d keys × %d messages, %d partition(s), %d rounds: %d violation(s)", keys, perKey, partitions, rounds, len(log.violations))
}
