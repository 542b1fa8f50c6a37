package bus_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/inmemory"
	"github.com/eventbus-go/bus/observer"
)

// countingNop counts Subscribe calls: a refused subscription makes none.
type countingNop struct {
	nopBackend
	subscribes atomic.Int32
}

func (c *countingNop) Subscribe(ctx context.Context, topic string, cfg backend.SubscribeConfig) (backend.Subscription, error) {
	c.subscribes.Add(1)
	return c.nopBackend.Subscribe(ctx, topic, cfg)
}

// WithKeyFailure(KeyHold) is refused before any I/O, with an error that
// says what to do, wherever it cannot hold: without key ordering, a
// dead-letter topic or redeliveries, with broadcast or batches, and on a
// backend without a group lock and inspection.
func TestKeyHoldRefusedBeforeIO(t *testing.T) {
	ctx := context.Background()
	be, err := inmemory.New(nil)
	require.NoError(t, err)
	b := bus.New(be, bus.WithObserver(observer.Nop()))
	defer closeBus(t, b)
	h := func(context.Context, *bus.Delivery) error { return nil }
	hold := bus.WithKeyFailure(bus.KeyHold)
	for _, tc := range []struct {
		name string
		opts []bus.SubscribeOption
		want string
	}{
		{"no key ordering", []bus.SubscribeOption{hold}, "needs WithKeyOrdering"},
		{"no dead-letter topic", []bus.SubscribeOption{hold, bus.WithKeyOrdering(), bus.WithDeadLetter("")}, "give WithDeadLetter a topic"},
		{"ack on receive", []bus.SubscribeOption{hold, bus.WithKeyOrdering(), bus.WithAckMode(bus.AckOnReceive)}, "use AckOnSuccess or AckManual"},
		{"broadcast", []bus.SubscribeOption{hold, bus.WithKeyOrdering(), bus.WithBroadcast()}, "drop one of them"},
		{"unknown policy", []bus.SubscribeOption{bus.WithKeyFailure("retry"), bus.WithKeyOrdering()}, `want "skip" or "hold"`},
	} {
		_, err := b.Subscribe(ctx, "hold.refused", h, tc.opts...)
		require.Error(t, err, tc.name)
		assert.ErrorIs(t, err, bus.ErrInvalidOption, tc.name)
		assert.Contains(t, err.Error(), tc.want, tc.name)
	}
	_, err = b.SubscribeBatch(ctx, "hold.refused", func(context.Context, []*bus.Delivery) error { return nil }, hold, bus.WithKeyOrdering())
	require.ErrorIs(t, err, bus.ErrInvalidOption)
	assert.Contains(t, err.Error(), "not SubscribeBatch")
	groups, err := b.Groups(ctx, "hold.refused")
	require.NoError(t, err)
	assert.Empty(t, groups, "no group made")

	nop := &countingNop{}
	nb := bus.New(nop, bus.WithObserver(observer.Nop()))
	defer closeBus(t, nb)
	_, err = nb.Subscribe(ctx, "hold.refused", h, hold, bus.WithKeyOrdering())
	require.ErrorIs(t, err, bus.ErrUnsupported)
	assert.Contains(t, err.Error(), "needs a group lock")
	assert.Zero(t, nop.subscribes.Load(), "refused before any I/O")

	_, err = b.ReleaseKey(ctx, "hold.refused.dlq", "hold.refused", "default", "")
	require.ErrorIs(t, err, bus.ErrInvalidOption)
	_, err = b.ReleaseKey(ctx, "hold.refused.dlq", "hold.refused", "default", "acct-1")
	require.ErrorIs(t, err, bus.ErrNotFound)
	_, err = b.HeldKeys(ctx, "")
	require.ErrorIs(t, err, bus.ErrInvalidTopic)
}

// peeklessMem is the in-process backend with an Inspector that counts
// but cannot read a topic (as RabbitMQ's): KeyHold is refused on it at
// Subscribe, and no group is made.
type peeklessMem struct{ *inmemory.Backend }

func (peeklessMem) Peek(context.Context, string, string, int) ([]*backend.Message, string, error) {
	return nil, "", fmt.Errorf("peek: %w", backend.ErrUnsupported)
}

func TestKeyHoldRefusedWhereTheDeadLettersCannotBeRead(t *testing.T) {
	ctx := context.Background()
	be, err := inmemory.New(nil)
	require.NoError(t, err)
	b := bus.New(peeklessMem{be}, bus.WithObserver(observer.Nop()))
	defer closeBus(t, b)
	h := func(context.Context, *bus.Delivery) error { return nil }
	_, err = b.Subscribe(ctx, "hold.peekless", h, bus.WithKeyFailure(bus.KeyHold), bus.WithKeyOrdering())
	require.ErrorIs(t, err, bus.ErrUnsupported)
	assert.Contains(t, err.Error(), "use WithKeyFailure(KeySkip)")
	groups, err := b.Groups(ctx, "hold.peekless")
	require.NoError(t, err)
	assert.Empty(t, groups, "no group made")
	_, err = b.Subscribe(ctx, "hold.peekless", h, bus.WithKeyOrdering())
	require.NoError(t, err, "KeySkip, the default, works")
}

// A hold survives a restart: the subscription that dead-lettered the
// head closes, and the next one, on another Bus, learns the held key
// from the dead-letter topic and parks what comes next. Another group
// of the topic, with the default KeySkip, moves on. Replaying every
// dead letter (no IDs) replays the parked messages once each, after
// their head, and the other group acknowledges them unhandled.
func TestKeyHoldSurvivesARestart(t *testing.T) {
	ctx := context.Background()
	be, err := inmemory.New(nil)
	require.NoError(t, err)
	const topic, dlq = "ledger", "ledger.dlq"
	var fixed atomic.Bool
	held, other := &orderLog{}, &orderLog{}
	handler := func(log *orderLog) bus.Handler {
		return func(_ context.Context, d *bus.Delivery) error {
			if string(d.Payload) == "acct/1" && !fixed.Load() && log == held {
				return bus.Reject(errors.New("poisoned"))
			}
			log.add(d)
			return nil
		}
	}
	subscribe := func(b *bus.Bus) *bus.Subscription {
		sub, err := b.Subscribe(ctx, topic, handler(held), bus.WithGroup("ledger"), bus.WithKeyOrdering(),
			bus.WithKeyFailure(bus.KeyHold), bus.WithAckTimeout(time.Second), bus.WithStartFrom(bus.StartOldest))
		require.NoError(t, err)
		return sub
	}
	b1 := bus.New(be, bus.WithObserver(observer.Nop()))
	_, err = b1.Subscribe(ctx, topic, handler(other), bus.WithGroup("audit"), bus.WithKeyOrdering(), bus.WithStartFrom(bus.StartOldest))
	require.NoError(t, err)
	sub := subscribe(b1)
	require.NoError(t, b1.Publish(ctx, topic, keyedMsgs("acct", 3)...))
	waitHold(t, func() bool {
		keys, err := b1.HeldKeys(ctx, dlq)
		return err == nil && len(keys) == 1 && keys[0].Parked == 1
	}, "acct held, acct/2 parked")
	require.NoError(t, sub.Close(ctx))

	b2 := bus.New(be, bus.WithObserver(observer.Nop()))
	defer func() {
		// Both buses own be: the first Close closes it.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(t, b1.Close(ctx))
		_ = b2.Close(ctx)
	}()
	subscribe(b2)
	require.NoError(t, b2.Publish(ctx, topic, &bus.Message{Key: "acct", Payload: []byte("acct/3")}))
	waitHold(t, func() bool {
		keys, err := b2.HeldKeys(ctx, dlq)
		return err == nil && len(keys) == 1 && keys[0].Parked == 2 && other.len() == 4
	}, "after the restart acct/3 parked too; the other group handled all")
	assert.Equal(t, []string{"acct/0#1"}, held.list())
	dls, err := b2.DeadLetters(ctx, dlq, 0)
	require.NoError(t, err)
	require.Len(t, dls, 3)
	assert.True(t, dls[0].Holds)
	assert.Equal(t, bus.CodeRejected, dls[0].Code)
	for _, dl := range dls[1:] {
		assert.Equal(t, bus.CodeHeld, dl.Code)
		assert.Equal(t, dls[0].ID, dl.HeldBy)
		assert.False(t, dl.Holds)
	}

	fixed.Store(true)
	n, err := b2.ReplayDeadLetters(ctx, dlq)
	require.NoError(t, err)
	assert.Equal(t, 3, n)
	waitHold(t, func() bool { return held.len() == 4 }, "the head and the parked messages handled")
	assert.Equal(t, []string{"acct/0#1", "acct/1#1", "acct/2#1", "acct/3#1"}, held.list())
	// The other group acknowledges the replays unhandled: a message
	// published after them is the next it handles.
	require.NoError(t, b2.Publish(ctx, topic, &bus.Message{Key: "acct", Payload: []byte("acct/4")}))
	waitHold(t, func() bool { return other.len() == 5 && held.len() == 5 }, "acct/4 handled by both groups")
	assert.Equal(t, []string{"acct/0#1", "acct/1#1", "acct/2#1", "acct/3#1", "acct/4#1"}, other.list())
	keys, err := b2.HeldKeys(ctx, dlq)
	require.NoError(t, err)
	assert.Empty(t, keys)
}

// A head that fails again after its replay holds its key again, and the
// parked messages replayed after it are parked again, nothing handled.
func TestKeyHoldReplayedHeadFailingAgainHoldsAgain(t *testing.T) {
	ctx := context.Background()
	be, err := inmemory.New(nil)
	require.NoError(t, err)
	b := bus.New(be, bus.WithObserver(observer.Nop()))
	defer closeBus(t, b)
	log := &orderLog{}
	var failures atomic.Int32
	_, err = b.Subscribe(ctx, "acc", func(_ context.Context, d *bus.Delivery) error {
		if string(d.Payload) == "a/0" {
			failures.Add(1)
			return bus.Reject(errors.New("still poisoned"))
		}
		log.add(d)
		return nil
	}, bus.WithKeyOrdering(), bus.WithKeyFailure(bus.KeyHold))
	require.NoError(t, err)
	require.NoError(t, b.Publish(ctx, "acc", keyedMsgs("a", 2)...))
	parked := func() bool {
		keys, err := b.HeldKeys(ctx, "acc.dlq")
		return err == nil && len(keys) == 1 && keys[0].Parked == 1
	}
	waitHold(t, parked, "a held")
	heads, err := b.HeldKeys(ctx, "acc.dlq")
	require.NoError(t, err)
	_, err = b.ReplayDeadLetters(ctx, "acc.dlq", heads[0].Head)
	require.NoError(t, err)
	waitHold(t, func() bool { return failures.Load() == 2 && parked() }, "the head failed again, a/1 parked again")
	assert.Zero(t, log.len())
}

func waitHold(t *testing.T, cond func() bool, what string) {
	t.Helper()
	require.Eventually(t, cond, 20*time.Second, 10*time.Millisecond, what)
}

// interleaving publishes a live message of the key right after the
// replayed head of a hold is stored, before the parked messages are:
// what a publisher of the key does while an operator replays.
type interleaving struct {
	*inmemory.Backend
	head string
	live atomic.Bool
}

func (b *interleaving) Publish(ctx context.Context, topic string, msgs []*bus.BackendMessage) error {
	if err := b.Backend.Publish(ctx, topic, msgs); err != nil {
		return err
	}
	for _, m := range msgs {
		if _, replayed := m.Headers[bus.HeaderReplayed]; replayed && topic == "ledger" && m.ID == b.head && b.live.CompareAndSwap(false, true) {
			return b.Backend.Publish(ctx, topic, []*bus.BackendMessage{{ID: "live", Key: "acct", Payload: []byte("acct/live"), PublishedAt: time.Now()}})
		}
	}
	return nil
}

// holdLedger starts a bus on be, whose interleaving part is il, with a
// key-ordered KeyHold subscription to "ledger" that rejects acct/0 until
// it is fixed; publishes acct/0, acct/1 and acct/2; waits until acct is
// held with two parked; fixes the handler and names the head for il.
// It returns the bus (closed when t ends), the handled messages, the
// head's ID, and the order the replay of the head (or, with release,
// the release of the key) must handle them in, the live message last.
func holdLedger(ctx context.Context, t *testing.T, be bus.Backend, il *interleaving, release bool) (*bus.Bus, *orderLog, string, []string) {
	t.Helper()
	var fixed atomic.Bool
	b, log, held := holdAcct(ctx, t, be, func() bool { return !fixed.Load() })
	il.head = held.Head
	fixed.Store(true)
	want := []string{"acct/0#1", "acct/1#1", "acct/2#1", "acct/live#1"}
	if release {
		want = want[1:] // the released head stays a dead letter
	}
	return b, log, held.Head, want
}

// holdAcct starts a bus on be with a key-ordered KeyHold subscription
// to "ledger" that rejects acct/0 while poisoned reports true; publishes
// acct/0, acct/1 and acct/2; and waits until acct is held with two
// parked. It returns the bus (closed when t ends), the handled messages
// and the held key.
func holdAcct(ctx context.Context, t *testing.T, be bus.Backend, poisoned func() bool) (*bus.Bus, *orderLog, bus.HeldKey) {
	t.Helper()
	b := bus.New(be, bus.WithObserver(observer.Nop()))
	t.Cleanup(func() { closeBus(t, b) })
	log := &orderLog{}
	_, err := b.Subscribe(ctx, "ledger", func(_ context.Context, d *bus.Delivery) error {
		if string(d.Payload) == "acct/0" && poisoned() {
			return bus.Reject(errors.New("poisoned"))
		}
		log.add(d)
		return nil
	}, bus.WithKeyOrdering(), bus.WithKeyFailure(bus.KeyHold))
	require.NoError(t, err)
	require.NoError(t, b.Publish(ctx, "ledger", keyedMsgs("acct", 3)...))
	var held []bus.HeldKey
	waitHold(t, func() bool {
		held, err = b.HeldKeys(ctx, "ledger.dlq")
		return err == nil && len(held) == 1 && held[0].Parked == 2
	}, "acct held, 2 parked")
	return b, log, held[0]
}

// A message of a held key published while its head is replayed, stored
// between the head and the parked messages, runs after the parked
// messages, not before: it is parked while they come back, and replayed
// after them.
func TestKeyHoldReplayKeepsOrderWithLiveTraffic(t *testing.T) {
	for _, release := range []bool{false, true} {
		t.Run(map[bool]string{false: "replay", true: "release"}[release], func(t *testing.T) {
			ctx := context.Background()
			mem, err := inmemory.New(nil)
			require.NoError(t, err)
			be := &interleaving{Backend: mem}
			b, log, head, want := holdLedger(ctx, t, be, be, release)
			if release {
				_, err = b.ReleaseKey(ctx, "ledger.dlq", "ledger", "default", "acct")
			} else {
				_, err = b.ReplayDeadLetters(ctx, "ledger.dlq", head)
			}
			require.NoError(t, err)
			waitHold(t, func() bool { return log.len() == len(want) }, "every message handled")
			assert.True(t, be.live.Load(), "the live message came between the head and the parked ones")
			assert.Equal(t, want, log.list())
			waitHold(t, func() bool {
				held, err := b.HeldKeys(ctx, "ledger.dlq")
				return err == nil && len(held) == 0
			}, "nothing held or parked")
		})
	}
}

// slowRemoval is an interleaving backend whose first removal of a
// copy of the message with payload from a dead-letter topic waits for
// release: a replay has stored that message again, and the subscription
// handles it, and what comes after it, while its copy is still there.
type slowRemoval struct {
	*interleaving
	payload string
	waiting chan struct{} // closed when the removal waits
	release chan struct{}
	once    atomic.Bool
}

func (b *slowRemoval) DeleteCopies(ctx context.Context, name string, msgs []*bus.BackendMessage) (int, error) {
	for _, m := range msgs {
		if string(m.Payload) == b.payload && b.once.CompareAndSwap(false, true) {
			close(b.waiting)
			select {
			case <-b.release:
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
	}
	return b.interleaving.DeleteCopies(ctx, name, msgs)
}

// The hold of a key ends once, each parked message handled once, also
// when the replay that brings the last parked message back removes its
// copy from the dead-letter topic only after the subscription handled it
// and the live message parked behind it.
func TestKeyHoldReplaysAParkedMessageOnceWhileItsCopyIsRemoved(t *testing.T) {
	for _, release := range []bool{false, true} {
		t.Run(map[bool]string{false: "replay", true: "release"}[release], func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			mem, err := inmemory.New(nil)
			require.NoError(t, err)
			be := &slowRemoval{interleaving: &interleaving{Backend: mem}, payload: "acct/2", waiting: make(chan struct{}), release: make(chan struct{})}
			b, log, head, want := holdLedger(ctx, t, be, be.interleaving, release)
			replayed := make(chan error, 1)
			go func() {
				if release {
					_, err := b.ReleaseKey(ctx, "ledger.dlq", "ledger", "default", "acct")
					replayed <- err
					return
				}
				_, err := b.ReplayDeadLetters(ctx, "ledger.dlq", head)
				replayed <- err
			}()
			select {
			case <-be.waiting:
			case <-ctx.Done():
				t.Fatal("the replay removes acct/2's copy")
			}
			waitHold(t, func() bool { return log.len() >= len(want) }, "the parked messages and the live one handled while acct/2's copy is still parked")
			close(be.release)
			require.NoError(t, <-replayed)
			// A message published now runs after anything of the key
			// stored before it, a second acct/2 included.
			require.NoError(t, b.Publish(ctx, "ledger", &bus.Message{Key: "acct", Payload: []byte("acct/5")}))
			waitHold(t, func() bool { return slices.Contains(log.list(), "acct/5#1") }, "acct/5 handled")
			assert.Equal(t, append(want, "acct/5#1"), log.list(), "each message handled once, in order")
			keys, err := b.HeldKeys(ctx, "ledger.dlq")
			require.NoError(t, err)
			assert.Empty(t, keys, "nothing held or parked")
		})
	}
}

// A held key whose head was purged leaves its parked messages listed
// with no head; ReleaseKey replays them, in order, and the subscription
// that still holds the key lets them through.
func TestKeyHoldReleaseAfterTheHeadWasPurged(t *testing.T) {
	ctx := context.Background()
	be, err := inmemory.New(nil)
	require.NoError(t, err)
	b, log, key := holdAcct(ctx, t, be, func() bool { return true })
	_, err = b.PurgeDeadLetters(ctx, "ledger.dlq", key.Head)
	require.NoError(t, err)
	held, err := b.HeldKeys(ctx, "ledger.dlq")
	require.NoError(t, err)
	require.Len(t, held, 1)
	assert.Empty(t, held[0].Head)
	assert.Equal(t, 2, held[0].Parked)
	n, err := b.ReleaseKey(ctx, "ledger.dlq", "ledger", "default", "acct")
	require.NoError(t, err)
	assert.Equal(t, 2, n)
	waitHold(t, func() bool { return log.len() == 2 }, "the parked messages handled")
	assert.Equal(t, []string{"acct/1#1", "acct/2#1"}, log.list())
	require.NoError(t, b.Publish(ctx, "ledger", &bus.Message{Key: "acct", Payload: []byte("acct/3")}))
	waitHold(t, func() bool { return log.len() == 3 }, "the key is not held any more")
}

// ackLost is a member whose first settlement of one message (an ack, or
// the dead-lettering's) is lost on the way, as when its member dies right
// after writing the dead letter: the message is redelivered after its
// lease.
type ackLost struct {
	*inmemory.Backend
	id       string
	received atomic.Int32
}

func (a *ackLost) Subscribe(ctx context.Context, topic string, cfg backend.SubscribeConfig) (backend.Subscription, error) {
	sub, err := a.Backend.Subscribe(ctx, topic, cfg)
	if err != nil {
		return nil, err
	}
	return &ackLostSub{Subscription: sub.(*inmemory.Subscription), a: a}, nil
}

type ackLostSub struct {
	*inmemory.Subscription
	a    *ackLost
	mu   sync.Mutex
	drop backend.AckID // the ack to lose; nil once lost
	lost bool
}

func (s *ackLostSub) Receive(ctx context.Context, max int) ([]*backend.Message, error) {
	msgs, err := s.Subscription.Receive(ctx, max)
	for _, m := range msgs {
		if m.ID == s.a.id && s.a.received.Add(1) == 1 {
			s.mu.Lock()
			s.drop = m.AckID
			s.mu.Unlock()
		}
	}
	return msgs, err
}

// DeadLetter writes the dead letter but loses the settlement of the
// message's first delivery.
func (s *ackLostSub) DeadLetter(ctx context.Context, id backend.AckID, topic string, msg *backend.Message) error {
	s.mu.Lock()
	lose := !s.lost && s.drop != nil && id == s.drop
	s.lost = s.lost || lose
	s.mu.Unlock()
	if lose {
		return s.a.Publish(ctx, topic, []*backend.Message{msg})
	}
	return s.Subscription.DeadLetter(ctx, id, topic, msg)
}

func (s *ackLostSub) Ack(ctx context.Context, ids []backend.AckID) error {
	s.mu.Lock()
	kept := ids[:0:0]
	for _, id := range ids {
		if !s.lost && s.drop != nil && id == s.drop {
			s.lost = true
			continue
		}
		kept = append(kept, id)
	}
	s.mu.Unlock()
	if len(kept) == 0 {
		return nil
	}
	return s.Subscription.Ack(ctx, kept)
}

// A held key's head delivered again (its dead letter was written but its
// ack was lost) is recognised as the head: it is settled, not parked
// behind itself.
func TestKeyHoldHeadRedeliveredIsNotParkedBehindItself(t *testing.T) {
	ctx := context.Background()
	raw, err := inmemory.New(nil)
	require.NoError(t, err)
	const topic, dlq = "ledger", "ledger.dlq"
	lost := &ackLost{Backend: raw, id: "acct-1"}
	b := bus.New(lost, bus.WithObserver(observer.Nop()))
	defer closeBus(t, b)
	var handled orderLog
	_, err = b.Subscribe(ctx, topic, func(_ context.Context, d *bus.Delivery) error {
		if d.ID == "acct-1" {
			return bus.Reject(errors.New("poisoned"))
		}
		handled.add(d)
		return nil
	}, bus.WithGroup("ledger"), bus.WithKeyOrdering(), bus.WithKeyFailure(bus.KeyHold),
		bus.WithAckTimeout(time.Second), bus.WithStartFrom(bus.StartOldest))
	require.NoError(t, err)
	require.NoError(t, b.Publish(ctx, topic, &bus.Message{ID: "acct-0", Key: "acct"}, &bus.Message{ID: "acct-1", Key: "acct"}, &bus.Message{ID: "acct-2", Key: "acct"}))
	waitHold(t, func() bool {
		gs, err := raw.Groups(ctx, topic)
		return err == nil && len(gs) == 1 && gs[0].Pending == 0 && lost.received.Load() >= 2
	}, "the head came back after its lost ack, and everything is settled")
	keys, err := b.HeldKeys(ctx, dlq)
	require.NoError(t, err)
	require.Len(t, keys, 1)
	assert.Equal(t, "acct-1", keys[0].Head)
	assert.Equal(t, 1, keys[0].Parked, "acct-2 is parked; the head is not parked behind itself")
	dls, err := b.DeadLetters(ctx, dlq, 0)
	require.NoError(t, err)
	assert.Len(t, dls, 2, "the head and acct-2, once each")
	assert.Equal(t, 1, handled.len(), "acct-0 handled, nothing after the held head")
}
