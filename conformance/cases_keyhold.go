package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	bus "github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/testkit/crashtest"
	"github.com/eventbus-go/bus/internal/testkit/keyledger"
)

// testKeyHoldLedgerThroughACrash: a ledger of 100 accounts (keys) under
// WithKeyFailure(KeyHold), two members of one group. The head of 3
// accounts is poisoned (rejected): from then on no later message of
// those accounts is handled, neither by the member that held them nor,
// after it is killed, by the member that takes the group over and
// learns the holds from the dead-letter topic. HeldKeys lists them with
// their parked messages. Then two heads are replayed (the poison
// fixed) and the third key released: every parked message is handled,
// in each account's order, after its head (the released head never).
func testKeyHoldLedgerThroughACrash(t *testing.T, s *suite) {
	h := s.newHarness(t)
	h.crashHandover(t)
	h.inspector(t)
	topic, group := h.topic("keyhold"), h.group("keyhold")
	dlq := topic + ".dlq"
	probe, cancelProbe := context.WithTimeout(context.Background(), s.deadline())
	_, err := h.bus.DeadLetters(probe, dlq, 0)
	cancelProbe()
	if errors.Is(err, bus.ErrUnsupported) {
		t.Skipf("%s cannot read its dead-letter topic back (its Inspector's Peek is unsupported), which KeyHold needs: %v", s.caps.Name, err)
	}
	const accounts, poisonSeq = 100, 2
	perKey := count(10, 6)
	poisoned := map[string]bool{"k7": true, "k42": true, "k77": true}
	var fixed atomic.Bool
	var opened sync.Map // key -> true once its head was replayed or it was released
	var early atomic.Int32
	log := &holdLedger{}
	active := make(chan int, 64)
	views := make([]*crashtest.Member, 2)
	for i := range views {
		views[i] = crashtest.New(h.be)
		b := s.memberBus(t, views[i])
		_, err := b.Subscribe(context.Background(), topic, func(ctx context.Context, d *bus.Delivery) error {
			if views[i].Dead() {
				<-ctx.Done() // a killed process does nothing more
				return ctx.Err()
			}
			var key string
			var seq int
			_, _ = fmt.Sscanf(string(d.Payload), "%s %d", &key, &seq)
			if poisoned[key] && seq == poisonSeq && !fixed.Load() {
				return bus.Reject(errors.New("poisoned"))
			}
			if _, ok := opened.Load(key); poisoned[key] && seq > poisonSeq && !ok {
				early.Add(1)
			}
			log.add(key, seq, d.ID)
			trySend(active, i)
			return nil
		}, bus.WithGroup(group), bus.WithKeyOrdering(), bus.WithKeyFailure(bus.KeyHold),
			bus.WithAckTimeout(s.ackTimeout()), bus.WithMaxInFlight(16))
		require.NoError(t, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*s.deadline())
	defer cancel()
	var last atomic.Value // string: what the last heldWith saw, for a failure's message
	heldWith := func(parked int) bool {
		keys, err := h.bus.HeldKeys(ctx, dlq)
		last.Store(fmt.Sprintf("handled %d distinct; held keys %+v (err %v)", log.distinct(), keys, err))
		if err != nil || len(keys) != len(poisoned) {
			return false
		}
		for _, k := range keys {
			if !poisoned[k.Key] || k.Head == "" || k.Parked != parked || k.Topic != topic || k.Group != group {
				return false
			}
		}
		return true
	}

	half := perKey / 2
	h.publish(topic, keyledger.Messages(accounts, 0, half)...)
	victim := recv(t, s, active, "a member handles the first messages")
	if !assert.Eventually(t, func() bool {
		return log.distinct() == (accounts-len(poisoned))*half+len(poisoned)*poisonSeq && heldWith(half-poisonSeq-1)
	}, s.deadline(), pollInterval) {
		t.Fatalf("every account handled up to its head (%d distinct), 3 held with %d parked each: last seen %s",
			(accounts-len(poisoned))*half+len(poisoned)*poisonSeq, half-poisonSeq-1, last.Load())
	}
	views[victim].Crash()

	h.publish(topic, keyledger.Messages(accounts, half, perKey)...)
	if !assert.Eventually(t, func() bool {
		return log.distinct() == (accounts-len(poisoned))*perKey+len(poisoned)*poisonSeq && heldWith(perKey-poisonSeq-1)
	}, s.deadline(), pollInterval) {
		t.Fatalf("the other member takes over: every other account handled (%d distinct), the held ones still held with %d parked each: last seen %s",
			(accounts-len(poisoned))*perKey+len(poisoned)*poisonSeq, perKey-poisonSeq-1, last.Load())
	}
	require.Zero(t, early.Load(), "messages of a held key handled after its head was dead-lettered")

	fixed.Store(true)
	keys, err := h.bus.HeldKeys(ctx, dlq)
	require.NoError(t, err)
	var heads []string
	for _, k := range keys {
		opened.Store(k.Key, true)
		if k.Key != "k77" {
			heads = append(heads, k.Head)
		}
	}
	n, err := h.bus.ReplayDeadLetters(ctx, dlq, heads...)
	require.NoError(t, err)
	assert.Equal(t, 2*(perKey-poisonSeq), n, "the 2 heads and their parked messages replayed")
	n, err = h.bus.ReleaseKey(ctx, dlq, topic, group, "k77")
	require.NoError(t, err)
	assert.Equal(t, perKey-poisonSeq-1, n, "the released key's parked messages replayed")

	s.eventually(t, func() bool { return log.distinct() == accounts*perKey-1 }, "every parked message handled after the replay")
	for k := range accounts {
		key := fmt.Sprintf("k%d", k)
		want := make([]int, 0, perKey)
		for seq := range perKey {
			if key != "k77" || seq != poisonSeq {
				want = append(want, seq)
			}
		}
		assert.Equal(t, want, log.order(key), "account %s handled in order, each message once at least", key)
	}
	s.eventually(t, func() bool {
		keys, err := h.bus.HeldKeys(ctx, dlq)
		return err == nil && len(keys) == 0
	}, "no key held after the replay and the release")
	var dls []bus.DeadLetter
	s.eventually(t, func() bool {
		dls, err = h.bus.DeadLetters(ctx, dlq, 0)
		return err == nil && len(dls) == 1
	}, "the released head stays a dead letter, and no other")
	assert.Equal(t, bus.CodeReleased, dls[0].Code)
	assert.Equal(t, "k77", dls[0].Key)
	assert.False(t, dls[0].Holds)
	t.Logf("key hold ledger: %d accounts × %d, 3 poisoned heads, member %d killed: 0 held messages handled early, all handled after the replay (2) and the release (1)", accounts, perKey, victim)
}

// holdLedger records, per key, the sequence numbers handled, first
// handling only (a killed member's unacked work may run twice).
type holdLedger struct {
	mu   sync.Mutex
	seen map[string]bool
	seqs map[string][]int
}

func (l *holdLedger) add(key string, seq int, id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen == nil {
		l.seen, l.seqs = map[string]bool{}, map[string][]int{}
	}
	if !l.seen[id] {
		l.seen[id] = true
		l.seqs[key] = append(l.seqs[key], seq)
	}
}

func (l *holdLedger) distinct() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.seen)
}

func (l *holdLedger) order(key string) []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.seqs[key])
}
