package conformance

import (
	"context"
	"errors"
	"fmt"
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
	mu      sync.Mutex
	order   map[string][]string
	running map[string]int
	overlap []string
	total   atomic.Int64
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
// key-ordered group consumes at a time; when it closes, the next takes
// over and every key stays in publish order across the two.
func testKeyOrderOneActiveMember(t *testing.T, s *suite) {
	h := s.newHarness(t)
	h.locker(t)
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
	opts := []bus.SubscribeOption{bus.WithGroup(group), bus.WithKeyOrdering(), bus.WithMaxInFlight(8), bus.WithAckTimeout(s.ackTimeout())}
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
		t.Log("the second member held the lock first")
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
