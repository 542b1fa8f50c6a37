package bus_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/inmemory"
	"github.com/eventbus-go/bus/internal/testkit/crashtest"
	"github.com/eventbus-go/bus/observer"
)

// orderLog records the payloads a handler saw, with their attempts.
type orderLog struct {
	mu  sync.Mutex
	got []string
}

func (l *orderLog) add(d *bus.Delivery) {
	l.mu.Lock()
	l.got = append(l.got, fmt.Sprintf("%s#%d", d.Payload, d.Attempt))
	l.mu.Unlock()
}

func (l *orderLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.got)
}

func (l *orderLog) list() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.got...)
}

func keyedMsgs(key string, n int) []*bus.Message {
	msgs := make([]*bus.Message, n)
	for i := range msgs {
		msgs[i] = &bus.Message{Key: key, Payload: fmt.Appendf(nil, "%s/%d", key, i)}
	}
	return msgs
}

func newMemBus(t *testing.T) *bus.Bus {
	t.Helper()
	be, err := inmemory.New(nil)
	require.NoError(t, err)
	return bus.New(be)
}

func closeBus(t *testing.T, b *bus.Bus) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, b.Close(ctx))
}

// Deliveries waiting behind a running head keep their leases alive: a
// head that runs five ack timeouts does not get its followers redelivered
// (they run once each, attempt 1, in order).
func TestKeyOrderingKeepsWaitingLeasesAlive(t *testing.T) {
	b := newMemBus(t)
	defer closeBus(t, b)
	const lease = 200 * time.Millisecond
	log := &orderLog{}
	_, err := b.Subscribe(context.Background(), "orders", func(ctx context.Context, d *bus.Delivery) error {
		if string(d.Payload) == "k/0" {
			select {
			case <-time.After(5 * lease):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		log.add(d)
		return nil
	}, bus.WithKeyOrdering(), bus.WithAckTimeout(lease), bus.WithMaxInFlight(8))
	require.NoError(t, err)
	require.NoError(t, b.Publish(context.Background(), "orders", keyedMsgs("k", 4)...))
	require.Eventually(t, func() bool { return log.len() >= 4 }, 10*time.Second, 5*time.Millisecond)
	require.Never(t, func() bool { return log.len() > 4 }, 2*lease, 10*time.Millisecond, "nothing came back after its lease")
	assert.Equal(t, []string{"k/0#1", "k/1#1", "k/2#1", "k/3#1"}, log.list())
}

// In AckManual, a Nack of a key's head retries it with Attempt+1 before
// the rest of the key.
func TestKeyOrderingManualNackRetriesTheHeadFirst(t *testing.T) {
	b := newMemBus(t)
	defer closeBus(t, b)
	log := &orderLog{}
	_, err := b.Subscribe(context.Background(), "orders", func(ctx context.Context, d *bus.Delivery) error {
		log.add(d)
		if string(d.Payload) == "k/0" && d.Attempt < 3 {
			return d.Nack(ctx, 5*time.Millisecond)
		}
		return d.Ack(ctx)
	}, bus.WithKeyOrdering(), bus.WithAckMode(bus.AckManual), bus.WithMaxInFlight(8))
	require.NoError(t, err)
	require.NoError(t, b.Publish(context.Background(), "orders", keyedMsgs("k", 3)...))
	require.Eventually(t, func() bool { return log.len() >= 5 }, 10*time.Second, 5*time.Millisecond)
	assert.Equal(t, []string{"k/0#1", "k/0#2", "k/0#3", "k/1#1", "k/2#1"}, log.list())
}

// A snoozed head holds its key like a retry but keeps its Attempt; a
// snooze that waits at close goes back uncounted, first, its key behind
// it.
func TestKeyOrderingSnoozeHoldsTheKeyWithoutCounting(t *testing.T) {
	b := newMemBus(t)
	defer closeBus(t, b)
	log := &orderLog{}
	sub, err := b.Subscribe(context.Background(), "orders", func(ctx context.Context, d *bus.Delivery) error {
		log.add(d)
		switch {
		case string(d.Payload) == "k/0" && log.len() < 3:
			return bus.Snooze(5 * time.Millisecond)
		case string(d.Payload) == "h/0":
			return bus.Snooze(time.Hour)
		}
		return nil
	}, bus.WithGroup("g"), bus.WithKeyOrdering(), bus.WithMaxInFlight(8), bus.WithMaxDeliveries(1))
	require.NoError(t, err)
	require.NoError(t, b.Publish(context.Background(), "orders", keyedMsgs("k", 2)...))
	require.Eventually(t, func() bool { return log.len() >= 4 }, 10*time.Second, 5*time.Millisecond)
	assert.Equal(t, []string{"k/0#1", "k/0#1", "k/0#1", "k/1#1"}, log.list(), "snoozed twice, not counted (max deliveries 1), k/1 after")

	require.NoError(t, b.Publish(context.Background(), "orders", keyedMsgs("h", 2)...))
	require.Eventually(t, func() bool { return log.len() >= 5 }, 10*time.Second, 5*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, sub.Close(ctx))
	again := &orderLog{}
	_, err = b.Subscribe(context.Background(), "orders", func(ctx context.Context, d *bus.Delivery) error {
		again.add(d)
		return nil
	}, bus.WithGroup("g"), bus.WithKeyOrdering(), bus.WithMaxDeliveries(1))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return again.len() >= 2 }, 10*time.Second, 5*time.Millisecond)
	assert.Equal(t, []string{"h/0#1", "h/1#1"}, again.list(), "the hour's snooze went back at close, uncounted, first")
}

// A delayed keyed message takes its place in its key's order when it is
// due: it does not hold back what was published for the key after it but
// due before it.
func TestKeyOrderingDelayedMessageTakesItsPlaceWhenDue(t *testing.T) {
	b := newMemBus(t)
	defer closeBus(t, b)
	log := &orderLog{}
	_, err := b.Subscribe(context.Background(), "orders", func(ctx context.Context, d *bus.Delivery) error {
		log.add(d)
		return nil
	}, bus.WithKeyOrdering(), bus.WithMaxInFlight(8))
	require.NoError(t, err)
	later := &bus.Message{Key: "k", Payload: []byte("k/later"), DeliverAt: time.Now().Add(100 * time.Millisecond)}
	require.NoError(t, b.Publish(context.Background(), "orders", later))
	require.NoError(t, b.Publish(context.Background(), "orders", keyedMsgs("k", 2)...))
	require.Eventually(t, func() bool { return log.len() >= 3 }, 10*time.Second, 5*time.Millisecond)
	assert.Equal(t, []string{"k/0#1", "k/1#1", "k/later#1"}, log.list())
}

// Close hands a key on in order: the rest of a key whose head is running
// goes back to the group after the head (or is handled by the closing
// member while it drains), and a head waiting for its retry goes back at
// once, first, with the rest of its key behind it.
func TestKeyOrderingCloseHandsTheRestOfTheKeyOnInOrder(t *testing.T) {
	b := newMemBus(t)
	defer closeBus(t, b)
	log := &orderLog{}
	started, finish := make(chan struct{}), make(chan struct{})
	var once sync.Once
	sub, err := b.Subscribe(context.Background(), "orders", func(ctx context.Context, d *bus.Delivery) error {
		switch string(d.Payload) {
		case "a/0":
			once.Do(func() { close(started) })
			<-finish
		case "b/0":
			log.add(d)
			return errors.New("retry me later")
		}
		log.add(d)
		return nil
	}, bus.WithGroup("g"), bus.WithKeyOrdering(), bus.WithMaxInFlight(16),
		bus.WithRetryBackoff(func() backoff.BackOff { return backoff.NewConstantBackOff(time.Hour) }))
	require.NoError(t, err)
	msgs := append(keyedMsgs("a", 4), keyedMsgs("b", 3)...)
	require.NoError(t, b.Publish(context.Background(), "orders", msgs...))
	<-started
	require.Eventually(t, func() bool { return log.len() >= 1 }, 5*time.Second, 5*time.Millisecond, "b/0 failed once")

	closed := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		closed <- sub.Close(ctx)
	}()
	close(finish)
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return")
	}

	_, err = b.Subscribe(context.Background(), "orders", func(ctx context.Context, d *bus.Delivery) error {
		log.add(d)
		return nil
	}, bus.WithGroup("g"), bus.WithKeyOrdering(), bus.WithMaxInFlight(16))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return log.len() >= 8 }, 10*time.Second, 5*time.Millisecond, "handled: %v", log)
	var a, bs []string
	for _, s := range log.list() {
		if s[0] == 'a' {
			a = append(a, s)
		} else {
			bs = append(bs, s)
		}
	}
	assert.Equal(t, []string{"a/0#1", "a/1#1", "a/2#1", "a/3#1"}, a, "a in order, whichever member handled it")
	assert.Equal(t, []string{"b/0#1", "b/0#2", "b/1#1", "b/2#1"}, bs, "b/0's retry comes first, without waiting its hour")
}

// A Nack from inside an AckManual handler does not start the retry while
// that handler still runs: one at a time per key, also then.
func TestKeyOrderingRetryWaitsForTheNackingHandler(t *testing.T) {
	b := newMemBus(t)
	defer closeBus(t, b)
	var mu sync.Mutex
	running, overlaps := 0, 0
	log := &orderLog{}
	_, err := b.Subscribe(context.Background(), "orders", func(ctx context.Context, d *bus.Delivery) error {
		mu.Lock()
		if running++; running > 1 {
			overlaps++
		}
		mu.Unlock()
		defer func() {
			mu.Lock()
			running--
			mu.Unlock()
		}()
		log.add(d)
		if d.Attempt == 1 && string(d.Payload) == "k/0" {
			if err := d.Nack(ctx, 0); err != nil {
				return err
			}
			time.Sleep(50 * time.Millisecond) // still running after the nack
			return nil
		}
		return d.Ack(ctx)
	}, bus.WithKeyOrdering(), bus.WithAckMode(bus.AckManual), bus.WithMaxInFlight(8))
	require.NoError(t, err)
	require.NoError(t, b.Publish(context.Background(), "orders", keyedMsgs("k", 2)...))
	require.Eventually(t, func() bool { return log.len() >= 3 }, 10*time.Second, 5*time.Millisecond)
	assert.Equal(t, []string{"k/0#1", "k/0#2", "k/1#1"}, log.list())
	mu.Lock()
	defer mu.Unlock()
	assert.Zero(t, overlaps, "the retry started while the nacking handler still ran")
}

// takeoverBus is a bus on be, closed when the test ends, and two messages
// of key "k" of which the first is published to "orders".
func takeoverBus(t *testing.T, be backend.Backend) (*bus.Bus, []*bus.Message) {
	t.Helper()
	b := bus.New(be)
	t.Cleanup(func() { closeBus(t, b) })
	msgs := keyedMsgs("k", 2)
	require.NoError(t, b.Publish(context.Background(), "orders", msgs[0]))
	return b, msgs
}

// crashedHolder is a member of group "g" on "orders" that crashed: it
// took the oldest message with a lease of lease and holds the group lock
// for ghostTTL, and does nothing more. The caller closes it.
func crashedHolder(t *testing.T, ctx context.Context, be *inmemory.Backend, lease, ghostTTL time.Duration) backend.Subscription {
	t.Helper()
	ghost := lockHolder(t, ctx, be, lease, ghostTTL)
	taken, err := ghost.Receive(ctx, 1)
	require.NoError(t, err)
	require.Len(t, taken, 1, "the crashed member had taken k/0, unsettled")
	return ghost
}

// lockHolder is a member of group "g" on "orders" (ack timeout lease,
// from the oldest message) that holds the group lock for ghostTTL, as
// "crashed-member", and has fetched nothing yet. The caller closes it.
func lockHolder(t *testing.T, ctx context.Context, be *inmemory.Backend, lease, ghostTTL time.Duration) backend.Subscription {
	t.Helper()
	ghost, err := be.Subscribe(ctx, "orders", backend.SubscribeConfig{Group: "g", StartFrom: bus.StartOldest, AckTimeout: lease, Observer: observer.Nop()})
	require.NoError(t, err)
	held, _, err := be.LockGroup(ctx, "orders", "g", "crashed-member", ghostTTL)
	require.NoError(t, err)
	require.True(t, held)
	return ghost
}

// crashedGroup is an in-memory backend where k-0 is published to
// "orders" and taken by a crashedHolder of group "g" whose lock lapses
// after 200 ms.
func crashedGroup(t *testing.T, lease time.Duration) *inmemory.Backend {
	t.Helper()
	be, err := inmemory.New(nil)
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, be.Publish(ctx, "orders", []*backend.Message{{ID: "k-0", Key: "k"}}))
	ghost := crashedHolder(t, ctx, be, lease, 200*time.Millisecond)
	t.Cleanup(func() { _ = ghost.Close() })
	return be
}

// A member that takes the group lock over from one that let it lapse (a
// crashed member) with a delivery unsettled holds that delivery's key
// until it is back with the group, after its lease: it is handled before
// what came after it.
func TestKeyOrderingTakeoverWaitsOneAckTimeout(t *testing.T) {
	be, err := inmemory.New(nil)
	require.NoError(t, err)
	b, msgs := takeoverBus(t, be)
	const ghostTTL, lease = 200 * time.Millisecond, 400 * time.Millisecond
	ctx := context.Background()
	ghost := crashedHolder(t, ctx, be, lease, ghostTTL)
	defer ghost.Close()
	start := time.Now()
	handled := make(chan string, 4)
	at := make(chan time.Duration, 4)
	_, err = b.Subscribe(ctx, "orders", func(ctx context.Context, d *bus.Delivery) error {
		handled <- string(d.Payload)
		at <- time.Since(start)
		return nil
	}, bus.WithGroup("g"), bus.WithKeyOrdering(), bus.WithAckTimeout(lease))
	require.NoError(t, err)
	require.NoError(t, b.Publish(ctx, "orders", msgs[1]))
	for _, want := range []string{"k/0", "k/1"} {
		select {
		case got := <-handled:
			assert.Equal(t, want, got, "what the crashed member left comes first")
			assert.GreaterOrEqual(t, <-at, ghostTTL, "fetched before the lapsed lock's ttl")
		case <-time.After(10 * time.Second):
			t.Fatal("the member never took the lapsed lock over")
		}
	}
}

// unlisted is an in-memory backend whose subscriptions cannot list what
// their group has pending (as on NATS), and that reports when a holder
// other than "crashed-member" first holds a group lock.
type unlisted struct {
	*inmemory.Backend
	once  sync.Once
	taken chan struct{}
}

func (u *unlisted) LockGroup(ctx context.Context, topic, group, holder string, ttl time.Duration) (bool, bool, error) {
	held, takeover, err := u.Backend.LockGroup(ctx, topic, group, holder, ttl)
	if held && holder != "crashed-member" {
		u.once.Do(func() { close(u.taken) })
	}
	return held, takeover, err
}

func (u *unlisted) Subscribe(ctx context.Context, topic string, cfg backend.SubscribeConfig) (backend.Subscription, error) {
	sub, err := u.Backend.Subscribe(ctx, topic, cfg)
	if err != nil {
		return nil, err
	}
	return unlistedSub{sub.(*inmemory.Subscription)}, nil
}

// unlistedSub is an in-memory subscription without backend.PendingLister.
type unlistedSub struct{ *inmemory.Subscription }

// PendingDeliveries hides the in-memory subscription's: unlistedSub is
// no backend.PendingLister.
func (unlistedSub) PendingDeliveries() {}

// A member that takes the group lock over from one that let it lapse, on
// a backend that cannot list what the group has pending, waits for what
// the lapsed holder's last fetch was handed after the takeover (a fetch
// at the broker outlives its member by up to about a second): that
// message, leased from then, is handled before what was published after
// it.
func TestKeyOrderingTakeoverWaitsForTheLapsedHoldersLastFetch(t *testing.T) {
	mem, err := inmemory.New(nil)
	require.NoError(t, err)
	be := &unlisted{Backend: mem, taken: make(chan struct{})}
	b, msgs := takeoverBus(t, be)
	const ghostTTL, lease = 200 * time.Millisecond, 400 * time.Millisecond
	ctx := context.Background()
	ghost := lockHolder(t, ctx, mem, lease, ghostTTL)
	defer ghost.Close()
	log := &orderLog{}
	_, err = b.Subscribe(ctx, "orders", func(ctx context.Context, d *bus.Delivery) error {
		log.add(d)
		return nil
	}, bus.WithGroup("g"), bus.WithKeyOrdering(), bus.WithAckTimeout(lease))
	require.NoError(t, err)
	select {
	case <-be.taken:
	case <-time.After(10 * time.Second):
		t.Fatal("the member never took the lapsed lock over")
	}
	// The lapsed holder's fetch is handed k/0 300 ms after the takeover,
	// as a fetch the broker still had from it would be.
	time.Sleep(300 * time.Millisecond)
	taken, err := ghost.Receive(ctx, 1)
	require.NoError(t, err)
	require.Len(t, taken, 1, "the lapsed holder's fetch took k/0")
	require.NoError(t, b.Publish(ctx, "orders", msgs[1]))
	require.Eventually(t, func() bool { return log.len() >= 2 }, 10*time.Second, 5*time.Millisecond, "both messages are handled")
	var order []string
	for _, h := range log.list()[:2] {
		payload, _, _ := strings.Cut(h, "#")
		order = append(order, payload)
	}
	assert.Equal(t, []string{"k/0", "k/1"}, order, "what the lapsed holder's last fetch took comes first")
}

// A member that takes over a lock whose group has nothing unsettled at the
// broker starts at once, without waiting an ack timeout.
func TestKeyOrderingTakeoverWithNothingPendingStartsAtOnce(t *testing.T) {
	be, err := inmemory.New(nil)
	require.NoError(t, err)
	b := bus.New(be)
	defer closeBus(t, b)
	const ghostTTL, lease = 200 * time.Millisecond, 5 * time.Second
	held, _, err := be.LockGroup(context.Background(), "orders", "g", "crashed-member", ghostTTL)
	require.NoError(t, err)
	require.True(t, held)
	start := time.Now()
	handled := make(chan time.Duration, 4)
	_, err = b.Subscribe(context.Background(), "orders", func(ctx context.Context, d *bus.Delivery) error {
		select {
		case handled <- time.Since(start):
		default:
		}
		return nil
	}, bus.WithGroup("g"), bus.WithKeyOrdering(), bus.WithAckTimeout(lease))
	require.NoError(t, err)
	require.NoError(t, b.Publish(context.Background(), "orders", keyedMsgs("k", 1)...))
	select {
	case took := <-handled:
		assert.GreaterOrEqual(t, took, ghostTTL, "not before the lapsed lock's ttl")
		assert.Less(t, took, lease, "nothing pending: no ack-timeout wait")
	case <-time.After(10 * time.Second):
		t.Fatal("the member never took the lapsed lock over")
	}
}

// A member that took the group lock over and waits for what the lapsed
// holder left, and closes before it started, lets the lock lapse at once
// rather than keeping it for its ttl or releasing it: the next member
// takes it over at once, and as a takeover, so it waits the same way.
func TestKeyOrderingWaitingMemberThatClosesLetsTheLockLapse(t *testing.T) {
	be, err := inmemory.New(nil)
	require.NoError(t, err)
	defer be.Close()
	const ghostTTL, lease = 200 * time.Millisecond, 20 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	msgs := keyedMsgs("k", 1)
	require.NoError(t, bus.New(be).Publish(ctx, "orders", msgs[0]))
	ghost := crashedHolder(t, ctx, be, lease, ghostTTL)
	defer ghost.Close()

	spy := &takeoverSpy{Backend: be, took: make(chan struct{})}
	b := bus.New(spy, bus.WithObserver(observer.Nop()))
	defer closeBus(t, b)
	sub, err := b.Subscribe(ctx, "orders", func(context.Context, *bus.Delivery) error { return nil },
		bus.WithGroup("g"), bus.WithKeyOrdering(), bus.WithAckTimeout(lease))
	require.NoError(t, err)
	select {
	case <-spy.took:
	case <-ctx.Done():
		t.Fatal("the member never took the lapsed lock over")
	}
	require.NoError(t, sub.Close(ctx), "close the member while it waits")
	require.Eventually(t, func() bool {
		held, takeover, err := be.LockGroup(ctx, "orders", "g", "next-member", lease)
		require.NoError(t, err)
		if held {
			assert.True(t, takeover, "the next member takes the lock over, so it waits for k/0 too")
		}
		return held
	}, time.Second, 10*time.Millisecond, "the lock lapsed when the waiting member closed, not after its ttl (%v)", lease/2)
}

// takeoverSpy closes took when a member takes a group lock over.
type takeoverSpy struct {
	*inmemory.Backend
	took chan struct{}
	once sync.Once
}

func (s *takeoverSpy) LockGroup(ctx context.Context, topic, group, holder string, ttl time.Duration) (bool, bool, error) {
	held, takeover, err := s.Backend.LockGroup(ctx, topic, group, holder, ttl)
	if held && takeover {
		s.once.Do(func() { close(s.took) })
	}
	return held, takeover, err
}

// The ledger of key ordering through a crash: K keys × M members on one
// broker, the active member crashes mid-run; every message is handled,
// and every member handles every key in publish order; what the crashed
// member handled without its ack arriving comes again (at least once),
// before anything after it.
func TestKeyOrderingLedgerThroughAMemberCrash(t *testing.T) {
	const keys, perKey, members = 8, 40, 3
	const lease = 300 * time.Millisecond
	shared, err := inmemory.New(nil)
	require.NoError(t, err)
	defer shared.Close()
	var mu sync.Mutex
	seen := map[int]map[string][]int{} // member -> key -> sequence numbers in handling order
	at := map[int]map[string][]int{}   // member -> key -> the index in all of each of those
	var all []ledgerHandling           // every handling, in order
	handled := map[string]bool{}
	backends, active := ledgerMembers(t, shared, members, lease, func(i int, key string, seq int, id string) {
		mu.Lock()
		defer mu.Unlock()
		if seen[i] == nil {
			seen[i], at[i] = map[string][]int{}, map[string][]int{}
		}
		seen[i][key] = append(seen[i][key], seq)
		at[i][key] = append(at[i][key], len(all))
		all = append(all, ledgerHandling{i, key, seq})
		handled[id] = true
	})
	pub := bus.New(shared)
	victim := crashMidLedger(t, pub, keys, perKey, backends, active, func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(handled)
	}, 20*time.Second)
	mu.Lock()
	defer mu.Unlock()
	// Each member handled each key in publish order. What the crashed
	// member handled without its ack arriving is handled again by the
	// next (at least once), and the next goes on from there without a
	// gap: it never skips ahead of a message it has not seen, unless
	// another member, which held the group lock meanwhile (a member
	// fenced under load loses it), handled the messages in between.
	for m, byKey := range seen {
		for key, seqs := range byKey {
			for i := 1; i < len(seqs); i++ {
				require.GreaterOrEqual(t, seqs[i], seqs[i-1], "member %d, key %s out of order: %v", m, key, seqs)
				if m == victim {
					continue
				}
				between := all[at[m][key][i-1]+1 : at[m][key][i]]
				for skipped := seqs[i-1] + 1; skipped < seqs[i]; skipped++ {
					require.True(t, slices.ContainsFunc(between, func(x ledgerHandling) bool {
						return x.member != m && x.key == key && x.seq == skipped
					}), "member %d, key %s skipped ahead of %d, which no other member handled meanwhile: %v", m, key, skipped, seqs)
					t.Logf("member %d, key %s: %d handled by another member meanwhile", m, key, skipped)
				}
			}
		}
	}
	// No gap at the handover: the members that took over start each key
	// at or before the message after the last one the crashed member saw.
	for k := range keys {
		key := fmt.Sprintf("k%d", k)
		next := 0
		if v := seen[victim][key]; len(v) > 0 {
			next = v[len(v)-1] + 1
		}
		first := perKey
		for m, byKey := range seen {
			if m != victim && len(byKey[key]) > 0 {
				first = min(first, byKey[key][0])
			}
		}
		if next < perKey {
			assert.LessOrEqual(t, first, next, "key %s: the next member starts at %d, after a gap from %d", key, first, next)
		}
	}
	t.Logf("ledger: %d keys × %d messages, %d members, member %d crashed: lost 0, no key out of order", keys, perKey, members, victim)
}

// ledgerHandling is one message a member of a ledger test handled.
type ledgerHandling struct {
	member int
	key    string
	seq    int
}

// ledgerMembers subscribes members key-ordered members of group "g" on
// "orders", each a Bus over its own crashable view of shared; record is
// told each message a live member handles ("<key> <seq>"), and active
// which member handled one.
func ledgerMembers(t *testing.T, shared *inmemory.Backend, members int, lease time.Duration, record func(member int, key string, seq int, id string)) ([]*crashtest.Member, chan int) {
	t.Helper()
	active := make(chan int, 64)
	backends := make([]*crashtest.Member, members)
	for i := range members {
		backends[i] = crashtest.New(shared)
		b := bus.New(backends[i], bus.WithObserver(observer.Nop()))
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_ = b.Close(ctx) // the crashed member's Close reports what it could not settle
		})
		_, err := b.Subscribe(context.Background(), "orders", func(ctx context.Context, d *bus.Delivery) error {
			if backends[i].Dead() {
				<-ctx.Done() // a killed process does nothing more
				return ctx.Err()
			}
			var key string
			var seq int
			_, _ = fmt.Sscanf(string(d.Payload), "%s %d", &key, &seq)
			record(i, key, seq, d.ID)
			select {
			case active <- i:
			default:
			}
			return nil
		}, bus.WithGroup("g"), bus.WithKeyOrdering(), bus.WithAckTimeout(lease), bus.WithMaxInFlight(8))
		require.NoError(t, err)
	}
	return backends, active
}

// crashMidLedger runs a ledger: the first half of each key's messages, a
// crash of the first member that handles one, the second half; then it
// waits within the bound until handled reports every message handled,
// and returns the crashed member.
func crashMidLedger(t *testing.T, pub *bus.Bus, keys, perKey int, backends []*crashtest.Member, active <-chan int, handled func() int, within time.Duration) int {
	t.Helper()
	ids := publishLedger(t, pub, keys, 0, perKey/2)
	var victim int
	select {
	case victim = <-active:
	case <-time.After(10 * time.Second):
		t.Fatal("no member handled anything")
	}
	backends[victim].Crash()
	ids = append(ids, publishLedger(t, pub, keys, perKey/2, perKey)...)
	require.Eventually(t, func() bool { return handled() == len(ids) }, within, 10*time.Millisecond,
		"every published message handled after the crash")
	return victim
}

// publishLedger publishes messages from to to-1 of each of keys keys, in
// rounds, and returns their IDs.
func publishLedger(t *testing.T, pub *bus.Bus, keys, from, to int) []string {
	t.Helper()
	var ids []string
	for seq := from; seq < to; seq++ {
		batch := make([]*bus.Message, 0, keys)
		for k := range keys {
			batch = append(batch, &bus.Message{Key: fmt.Sprintf("k%d", k), Payload: fmt.Appendf(nil, "k%d %d", k, seq)})
		}
		require.NoError(t, pub.Publish(context.Background(), "orders", batch...))
		for _, m := range batch {
			ids = append(ids, m.ID)
		}
	}
	return ids
}

// A key-ordered member that closes cleanly finishes what it fetched (the
// deliveries waiting behind their keys' heads too), so the next member
// starts as soon as nothing of the group is unsettled: well within one
// ack timeout, and with every key in publish order.
func TestKeyOrderingCleanCloseHandsOverWithinTheAckTimeout(t *testing.T) {
	be, err := inmemory.New(nil)
	require.NoError(t, err)
	defer be.Close()
	const lease = 20 * time.Second
	ctx := context.Background()
	var mu sync.Mutex
	var order []string
	firstRunning, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	first := bus.New(member{be}, bus.WithObserver(observer.Nop()))
	defer closeBus(t, first)
	sub, err := first.Subscribe(ctx, "orders", func(_ context.Context, d *bus.Delivery) error {
		if string(d.Payload) == "k/0" {
			once.Do(func() { close(firstRunning) })
			<-release
		}
		mu.Lock()
		order = append(order, string(d.Payload))
		mu.Unlock()
		return nil
	}, bus.WithGroup("g"), bus.WithKeyOrdering(), bus.WithAckTimeout(lease))
	require.NoError(t, err)
	require.NoError(t, first.Publish(ctx, "orders", keyedMsgs("k", 3)...))
	select {
	case <-firstRunning:
	case <-time.After(10 * time.Second):
		t.Fatal("the first member never ran k/0")
	}
	// The second member joins while the first holds the lock.
	second := bus.New(member{be}, bus.WithObserver(observer.Nop()))
	defer closeBus(t, second)
	took := make(chan time.Time, 16)
	_, err = second.Subscribe(ctx, "orders", func(_ context.Context, d *bus.Delivery) error {
		mu.Lock()
		order = append(order, string(d.Payload))
		mu.Unlock()
		took <- time.Now()
		return nil
	}, bus.WithGroup("g"), bus.WithKeyOrdering(), bus.WithAckTimeout(lease))
	require.NoError(t, err)
	closed := make(chan error, 1)
	go func() { closed <- sub.Close(ctx) }()
	close(release)
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(lease / 2):
		t.Fatal("the first member's Close did not return")
	}
	assertNextMemberRunsK3(t, first, took, lease, &mu, &order, "the closing member finished what it fetched; the key stays in order")
}

// lockCut is a member whose link to the group lock is cut on cut() while
// its deliveries still reach the broker: it can no longer renew the lock,
// yet it could keep its leases alive. It must fence itself: cancel what
// it runs, keep nothing alive, start nothing more.
type lockCut struct {
	*inmemory.Backend
	cut atomic.Bool
}

func (c *lockCut) LockGroup(ctx context.Context, topic, group, holder string, ttl time.Duration) (bool, bool, error) {
	if c.cut.Load() {
		return false, false, errors.New("lock store unreachable")
	}
	return c.Backend.LockGroup(ctx, topic, group, holder, ttl)
}

// Close leaves the shared broker open for the other member.
func (c *lockCut) Close() error { return nil }

// fenceTheHead runs k/0 and k/1 through a member whose handler of k/0
// runs until the member loses the group lock (its link to the lock is
// cut) and then returns what ret makes of its ctx, while a second member
// waits for the lock. It returns what the second member handled, and what
// the first member started after k/0.
func fenceTheHead(t *testing.T, lease time.Duration, ret func(ctx context.Context) error) (*orderLog, chan string) {
	t.Helper()
	be, err := inmemory.New(nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = be.Close() })
	ctx := context.Background()
	cutA := &lockCut{Backend: be}
	a := bus.New(cutA, bus.WithObserver(observer.Nop()))
	t.Cleanup(func() { closeBus(t, a) })
	started, cause := make(chan string, 4), make(chan error, 1)
	_, err = a.Subscribe(ctx, "orders", func(ctx context.Context, d *bus.Delivery) error {
		started <- string(d.Payload)
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return ret(ctx)
	}, bus.WithGroup("g"), bus.WithKeyOrdering(), bus.WithAckTimeout(lease), bus.WithStartFrom(bus.StartOldest))
	require.NoError(t, err)
	require.NoError(t, a.Publish(ctx, "orders", keyedMsgs("k", 2)...))
	select {
	case got := <-started:
		require.Equal(t, "k/0", got, "the first member runs the key's head")
	case <-time.After(10 * time.Second):
		t.Fatal("the first member never started k/0")
	}
	b := bus.New(member{be})
	t.Cleanup(func() { closeBus(t, b) })
	order := &orderLog{}
	_, err = b.Subscribe(ctx, "orders", func(ctx context.Context, d *bus.Delivery) error {
		order.add(d)
		return nil
	}, bus.WithGroup("g"), bus.WithKeyOrdering(), bus.WithAckTimeout(lease))
	require.NoError(t, err)
	cutA.cut.Store(true)
	select {
	case err := <-cause:
		assert.ErrorIs(t, err, bus.ErrLeaseLost, "the fenced handler is told why")
	case <-time.After(10 * time.Second):
		t.Fatal("the member that lost the lock kept running its handler")
	}
	return order, started
}

// A member that loses the group lock while its handler runs, but could
// still extend the handler's lease, is fenced: its handler is cancelled
// with ErrLeaseLost, its lease lapses, and the next holder handles the key
// from that message on, in order.
func TestKeyOrderingMemberThatLosesTheLockIsFenced(t *testing.T) {
	const lease = 400 * time.Millisecond
	order, started := fenceTheHead(t, lease, func(ctx context.Context) error { return ctx.Err() })
	require.Eventually(t, func() bool { return order.len() >= 2 }, 15*time.Second, 10*time.Millisecond, "the next holder handles the key")
	assert.Equal(t, []string{"k/0#1", "k/1#1"}, order.list()[:2], "from the fenced message on, in order, given back without counting an attempt")
	assert.Empty(t, started, "the fenced member started nothing more")
}

// A fenced member whose handler returns nil all the same (its work was
// done when the lock was lost) acks the message: the next holder does
// not handle it again, and goes on with the rest of the key.
func TestKeyOrderingFencedHandlerThatSucceedsIsAcked(t *testing.T) {
	const lease = 400 * time.Millisecond
	order, started := fenceTheHead(t, lease, func(context.Context) error { return nil })
	require.Eventually(t, func() bool { return order.len() >= 1 }, 15*time.Second, 10*time.Millisecond, "the next holder handles the rest of the key")
	require.Never(t, func() bool { return order.len() > 1 }, 4*lease, 20*time.Millisecond, "nothing else comes: k/0 was acked")
	assert.Equal(t, []string{"k/1#1"}, order.list(), "the next holder handles only what the fenced member did not")
	assert.Empty(t, started, "the fenced member started nothing more")
}

func TestWithMaxWaitingIsValidated(t *testing.T) {
	b := newMemBus(t)
	defer closeBus(t, b)
	h := func(context.Context, *bus.Delivery) error { return nil }
	tests := []struct {
		name string
		opts []bus.SubscribeOption
		ok   bool
	}{
		{"zero", []bus.SubscribeOption{bus.WithKeyOrdering(), bus.WithMaxWaiting(0)}, false},
		{"negative", []bus.SubscribeOption{bus.WithKeyOrdering(), bus.WithMaxWaiting(-1)}, false},
		{"over the bound", []bus.SubscribeOption{bus.WithKeyOrdering(), bus.WithMaxWaiting(1<<20 + 1)}, false},
		{"without key ordering", []bus.SubscribeOption{bus.WithMaxWaiting(8)}, false},
		{"one", []bus.SubscribeOption{bus.WithKeyOrdering(), bus.WithMaxWaiting(1)}, true},
		{"the bound", []bus.SubscribeOption{bus.WithKeyOrdering(), bus.WithMaxWaiting(1 << 20)}, true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sub, err := b.Subscribe(context.Background(), "waitopt", h, append(tt.opts, bus.WithGroup(fmt.Sprintf("g%d", i)))...)
			if !tt.ok {
				require.ErrorIs(t, err, bus.ErrInvalidOption, "refused before any I/O")
				return
			}
			require.NoError(t, err)
			require.NoError(t, sub.Close(context.Background()))
		})
	}
}

// pendingOf is how many deliveries of group the backend has handed out
// unsettled.
func pendingOf(t *testing.T, b *bus.Bus, topic, group string) int64 {
	t.Helper()
	gs, err := b.Groups(context.Background(), topic)
	require.NoError(t, err)
	for _, g := range gs {
		if g.Name == group {
			require.True(t, g.Pending.Known(), "mem knows its pending count")
			return int64(g.Pending)
		}
	}
	return 0
}

// The deliveries waiting for their key are bounded by WithMaxWaiting:
// while a hot key's head runs, the subscription fetches until the
// waiting set is full and then pauses, holding at most MaxInFlight +
// MaxWaiting unsettled; once the head returns the rest of the key runs
// in order, and the other keys, published after it, with it.
func TestKeyOrderingFullWaitingSetPausesFetching(t *testing.T) {
	b := newMemBus(t)
	defer closeBus(t, b)
	const inFlight, waiting = 2, 8
	release := make(chan struct{})
	var log orderLog
	var handled atomic.Int64
	sub, err := b.Subscribe(context.Background(), "waitfull", func(ctx context.Context, d *bus.Delivery) error {
		if string(d.Payload) == "hot/0" {
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		if d.Key == "hot" {
			log.add(d)
		}
		handled.Add(1)
		return nil
	}, bus.WithKeyOrdering(), bus.WithMaxInFlight(inFlight), bus.WithMaxWaiting(waiting))
	require.NoError(t, err)
	hot := keyedMsgs("hot", 40)
	others := keyedMsgs("other", 5)
	require.NoError(t, b.Publish(context.Background(), "waitfull", hot...))
	require.NoError(t, b.Publish(context.Background(), "waitfull", others...))

	require.Eventually(t, func() bool { return pendingOf(t, b, "waitfull", "default") == 1+waiting },
		5*time.Second, time.Millisecond, "the head and a full waiting set are held")
	require.Never(t, func() bool { return pendingOf(t, b, "waitfull", "default") > 1+waiting },
		200*time.Millisecond, 5*time.Millisecond, "fetching pauses while the waiting set is full")
	assert.Equal(t, waiting, sub.Waiting(), "the subscription reports its full waiting set")
	close(release)
	require.Eventually(t, func() bool { return handled.Load() == int64(len(hot)+len(others)) },
		5*time.Second, time.Millisecond, "every message handled once the head returns")
	want := make([]string, len(hot))
	for i := range hot {
		want[i] = fmt.Sprintf("hot/%d#1", i)
	}
	assert.Equal(t, want, log.list(), "the hot key in order, each on its first attempt")
	assert.Zero(t, sub.Waiting(), "nothing waits once every message is handled")
}

// Slots and waiting units all come back: with one in-flight slot, a
// waiting set of two and keys whose heads fail now and then, every
// message is handled in order per key, with no unit lost to a stall.
func TestKeyOrderingSmallWaitingSetNeverLosesCapacity(t *testing.T) {
	b := newMemBus(t)
	defer closeBus(t, b)
	var mu sync.Mutex
	got := map[string][]string{}
	var handled atomic.Int64
	_, err := b.Subscribe(context.Background(), "waitsmall", func(ctx context.Context, d *bus.Delivery) error {
		var seq int
		_, _ = fmt.Sscanf(string(d.Payload[len(d.Key)+1:]), "%d", &seq)
		if seq%5 == 0 && d.Attempt == 1 {
			return errors.New("first attempt fails")
		}
		mu.Lock()
		got[d.Key] = append(got[d.Key], string(d.Payload))
		mu.Unlock()
		handled.Add(1)
		return nil
	}, bus.WithKeyOrdering(), bus.WithMaxInFlight(1), bus.WithMaxWaiting(2),
		bus.WithRetryBackoff(func() backoff.BackOff { return backoff.NewConstantBackOff(time.Millisecond) }))
	require.NoError(t, err)
	var all []*bus.Message
	for i := range 60 {
		for _, k := range []string{"a", "b", "c"} {
			all = append(all, &bus.Message{Key: k, Payload: fmt.Appendf(nil, "%s/%d", k, i)})
		}
	}
	require.NoError(t, b.Publish(context.Background(), "waitsmall", all...))
	require.Eventually(t, func() bool { return handled.Load() == int64(len(all)) }, 10*time.Second, time.Millisecond,
		"every message handled (a lost slot or unit would stall the subscription)")
	mu.Lock()
	defer mu.Unlock()
	for _, k := range []string{"a", "b", "c"} {
		want := make([]string, 60)
		for i := range want {
			want[i] = fmt.Sprintf("%s/%d", k, i)
		}
		assert.Equal(t, want, got[k], "key %s in publish order", k)
	}
}

// A member with a group lock drains what it fetched when it closes, but
// only until its Close ctx ends: then the deliveries still waiting for
// their key go back to the group, in order and uncounted, instead of
// reaching handlers whose ctx is cancelled. The next member handles the
// whole key once, in order, on first attempts.
func TestKeyOrderingForcedCloseGivesTheWaitingBack(t *testing.T) {
	be, err := inmemory.New(nil)
	require.NoError(t, err)
	defer be.Close()
	const lease = 20 * time.Second
	ctx := context.Background()
	headRunning := make(chan struct{})
	var once sync.Once
	var ranOnFirst atomic.Int64
	first := bus.New(member{be}, bus.WithObserver(observer.Nop()))
	defer closeBus(t, first)
	sub, err := first.Subscribe(ctx, "orders", func(ctx context.Context, d *bus.Delivery) error {
		if string(d.Payload) == "k/0" {
			once.Do(func() { close(headRunning) })
			<-ctx.Done()
			return ctx.Err()
		}
		ranOnFirst.Add(1)
		return nil
	}, bus.WithGroup("g"), bus.WithKeyOrdering(), bus.WithAckTimeout(lease))
	require.NoError(t, err)
	msgs := keyedMsgs("k", 30)
	require.NoError(t, first.Publish(ctx, "orders", msgs...))
	select {
	case <-headRunning:
	case <-time.After(10 * time.Second):
		t.Fatal("the first member never ran k/0")
	}
	require.Eventually(t, func() bool { return sub.Waiting() == len(msgs)-1 }, 5*time.Second, time.Millisecond,
		"the rest of the key waits behind its head")
	closeCtx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	require.Error(t, sub.Close(closeCtx), "the close ctx ends while the head runs")
	assert.Zero(t, ranOnFirst.Load(), "no waiting delivery reached a handler after the close ctx ended")

	second := bus.New(member{be}, bus.WithObserver(observer.Nop()))
	defer closeBus(t, second)
	var log orderLog
	_, err = second.Subscribe(ctx, "orders", func(_ context.Context, d *bus.Delivery) error {
		log.add(d)
		return nil
	}, bus.WithGroup("g"), bus.WithKeyOrdering(), bus.WithAckTimeout(lease))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return log.len() >= len(msgs) }, 10*time.Second, time.Millisecond,
		"the next member handles the key")
	want := make([]string, len(msgs))
	for i := range msgs {
		want[i] = fmt.Sprintf("k/%d#1", i)
	}
	assert.Equal(t, want, log.list(), "the whole key once, in order, uncounted")
}

// keyedBackendMsgs returns n messages of each of keys, the keys
// interleaved, as a backend hands them out.
func keyedBackendMsgs(keys []string, n int) []*bus.BackendMessage {
	var msgs []*bus.BackendMessage
	for i := range n {
		for _, k := range keys {
			id := fmt.Sprintf("%s/%d", k, i)
			msgs = append(msgs, &bus.BackendMessage{ID: id, Key: k, Payload: []byte(id), PublishedAt: time.Now()})
		}
	}
	return msgs
}

// seqsInOrder reports whether the payloads of each key ("key/seq#attempt",
// see orderLog) come in the order of their seq, each once.
func seqsInOrder(t *testing.T, got []string) {
	t.Helper()
	next := map[string]int{}
	for _, g := range got {
		var seq int
		key, rest, _ := strings.Cut(g, "/")
		_, err := fmt.Sscanf(rest, "%d#", &seq)
		require.NoError(t, err)
		assert.Equal(t, next[key], seq, "key %s: %s in its turn", key, g)
		next[key] = seq + 1
	}
}

// A backlog of a blocked key does not hold back the keys behind it for a
// fetch per free slot: with the head of the hot key running and 299 of
// its messages queued ahead of the other keys, the subscription reaches
// the other keys within a few Receives, never runs more than MaxInFlight
// handlers at once, and handles every key in order.
func TestKeyOrderingPassesABlockedKeysBacklogInFewFetches(t *testing.T) {
	const inFlight, hotN, otherKeys, perKey = 4, 300, 16, 5
	f := newFakeBackend()
	b := bus.New(f, bus.WithAckBatch(64, time.Millisecond))
	defer closeBus(t, b)
	var others []string
	for i := range otherKeys {
		others = append(others, fmt.Sprintf("k%d", i))
	}
	var log orderLog
	var running, maxRunning, othersDone atomic.Int64
	fetchesToOthers := atomic.Int64{}
	othersHandled := make(chan struct{})
	_, err := b.Subscribe(context.Background(), "backlog", func(ctx context.Context, d *bus.Delivery) error {
		now := running.Add(1)
		defer running.Add(-1)
		raiseTo(&maxRunning, now)
		log.add(d)
		switch {
		case string(d.Payload) == "hot/0":
			// The head holds its key until the other keys are done.
			select {
			case <-othersHandled:
			case <-ctx.Done():
			case <-time.After(10 * time.Second):
			}
		case d.Key != "hot":
			fetchesToOthers.CompareAndSwap(0, int64(len(f.receiveCalls())))
			if othersDone.Add(1) == otherKeys*perKey {
				close(othersHandled)
			}
		}
		return nil
	}, bus.WithKeyOrdering(), bus.WithMaxInFlight(inFlight))
	require.NoError(t, err)
	f.push(keyedBackendMsgs([]string{"hot"}, hotN)...)
	f.push(keyedBackendMsgs(others, perKey)...)
	select {
	case <-othersHandled:
	case <-time.After(10 * time.Second):
		t.Fatalf("the other keys were not handled while the hot key's head ran (%d of %d)", othersDone.Load(), otherKeys*perKey)
	}
	total := hotN + otherKeys*perKey
	require.Eventually(t, func() bool { a, _, _ := f.snapshot(); return len(a) == total }, 10*time.Second, time.Millisecond,
		"every message acked")
	// A fetch per free slot would take (hotN-1)/(inFlight-1) = 100
	// Receives to reach them.
	assert.LessOrEqual(t, fetchesToOthers.Load(), int64(12), "Receives before the first other key started")
	assert.LessOrEqual(t, maxRunning.Load(), int64(inFlight), "handlers running at once")
	seqsInOrder(t, log.list())
	assert.Equal(t, total, log.len(), "each message handled once")
}

// Deliveries fetched beyond the free slots that wait for one go back to
// the group when the subscription closes, the rest of their key after
// them: each message is settled once, none lost.
func TestKeyOrderingCloseGivesPendingDeliveriesBack(t *testing.T) {
	const inFlight, hotN, otherKeys, perKey = 2, 60, 8, 3
	f := newFakeBackend()
	b := bus.New(f, bus.WithAckBatch(64, time.Millisecond), bus.WithObserver(observer.Nop()))
	defer b.Close(context.Background())
	var others []string
	for i := range otherKeys {
		others = append(others, fmt.Sprintf("k%d", i))
	}
	var running, maxRunning atomic.Int64
	started := make(chan string, hotN+otherKeys*perKey)
	// Everything is queued before the first fetch, so the fetches pass
	// the hot key's backlog and reach the other keys before the slots are
	// full: fetching pauses while a delivery waits for a slot.
	f.push(keyedBackendMsgs([]string{"hot"}, hotN)...)
	f.push(keyedBackendMsgs(others, perKey)...)
	sub, err := b.Subscribe(context.Background(), "pendingclose", func(ctx context.Context, d *bus.Delivery) error {
		now := running.Add(1)
		defer running.Add(-1)
		raiseTo(&maxRunning, now)
		started <- string(d.Payload)
		// Every handler holds its slot until the close ends it.
		<-ctx.Done()
		return ctx.Err()
	}, bus.WithKeyOrdering(), bus.WithMaxInFlight(inFlight))
	require.NoError(t, err)
	total := hotN + otherKeys*perKey
	for range inFlight {
		within(t, started, "a handler start")
	}
	// Everything is fetched: what does not run waits for its key or a slot.
	require.Eventually(t, func() bool { return len(f.receiveCalls()) > 0 && f.queueLen() == 0 }, 10*time.Second, time.Millisecond,
		"every message fetched")
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_ = sub.Close(ctx)
	acked, nacks, _ := f.snapshot()
	settled := map[string]int{}
	for _, id := range acked {
		settled[id]++
	}
	for _, n := range nacks {
		settled[n.ID]++
	}
	assert.Len(t, settled, total, "every message settled")
	for id, n := range settled {
		assert.Equal(t, 1, n, "%s settled once", id)
	}
	assert.LessOrEqual(t, maxRunning.Load(), int64(inFlight), "handlers running at once")
	assert.Len(t, started, 0, "no delivery started after the two that held the slots")
}

// wrappingBackend is an in-memory backend whose subscriptions are
// wrapped by wrap, so that a test changes what one of their methods does.
type wrappingBackend struct {
	*inmemory.Backend
	wrap func(*inmemory.Subscription) backend.Subscription
}

func (b *wrappingBackend) Subscribe(ctx context.Context, topic string, cfg backend.SubscribeConfig) (backend.Subscription, error) {
	sub, err := b.Backend.Subscribe(ctx, topic, cfg)
	if err != nil {
		return nil, err
	}
	return b.wrap(sub.(*inmemory.Subscription)), nil
}

// settlingBackend is an in-memory backend whose subscriptions run
// afterList once, after their first list of pending deliveries.
func settlingBackend(raw *inmemory.Backend, afterList func()) *wrappingBackend {
	return &wrappingBackend{Backend: raw, wrap: func(sub *inmemory.Subscription) backend.Subscription {
		return &settlingSub{Subscription: sub, afterList: afterList}
	}}
}

type settlingSub struct {
	*inmemory.Subscription
	afterList func()
	once      sync.Once
}

func (s *settlingSub) PendingDeliveries(ctx context.Context, max int) ([]backend.Pending, bool, error) {
	ps, complete, err := s.Subscription.PendingDeliveries(ctx, max)
	s.once.Do(s.afterList)
	return ps, complete, err
}

// A member that takes the group lock over from a crashed one holds the
// keys of what the group has pending, and runs the other keys at once:
// the held key's pending delivery comes back after its lease and runs
// first, then the rest of its key.
func TestKeyOrderingTakeoverHoldsOnlyThePendingKeys(t *testing.T) {
	const lease = 2 * time.Second
	be := crashedGroup(t, lease)
	got := takeOver(t, be, lease, 3)
	assert.Equal(t, "j-0", got[0].id, "the other key runs first: %v", got)
	assert.Less(t, got[0].at, lease, "the other key does not wait for the lease: %v", got)
	assert.Equal(t, "k-0", got[1].id, "the crashed member's delivery comes back first: %v", got)
	assert.Equal(t, 2, got[1].attempt, "k-0 is a redelivery: %v", got)
	assert.Equal(t, "k-1", got[2].id, "then the rest of its key: %v", got)
}

// A held delivery that the crashed member's ack settled after the list
// (it acked just before it died) never comes back: once its lease has
// ended the member looks it up again, and its key runs on.
func TestKeyOrderingHeldDeliverySettledLaterFreesItsKey(t *testing.T) {
	raw, err := inmemory.New(nil)
	require.NoError(t, err)
	const ghostTTL, lease = 200 * time.Millisecond, 2 * time.Second
	ctx := context.Background()
	require.NoError(t, raw.Publish(ctx, "orders", []*backend.Message{{ID: "k-0", Key: "k"}}))
	ghost, err := raw.Subscribe(ctx, "orders", backend.SubscribeConfig{Group: "g", StartFrom: bus.StartOldest, AckTimeout: lease, Observer: observer.Nop()})
	require.NoError(t, err)
	defer ghost.Close()
	taken, err := ghost.Receive(ctx, 1)
	require.NoError(t, err)
	require.Len(t, taken, 1)
	held, _, err := raw.LockGroup(ctx, "orders", "g", "crashed-member", ghostTTL)
	require.NoError(t, err)
	require.True(t, held)
	be := settlingBackend(raw, func() {
		// The crashed member's ack of k-0 lands after the list.
		assert.NoError(t, ghost.Ack(ctx, []backend.AckID{taken[0].AckID}))
	})
	got := takeOver(t, be, lease, 2)
	assert.Equal(t, "j-0", got[0].id, "the other key runs first: %v", got)
	assert.Less(t, got[0].at, lease, "the other key does not wait for the lease: %v", got)
	assert.Equal(t, "k-1", got[1].id, "k-0 was settled: its key runs on: %v", got)
	assert.GreaterOrEqual(t, got[1].at, lease-ghostTTL, "k-1 waited for k-0's lease: %v", got)
}

// refusedLock is an in-memory backend that reports when a holder other
// than "previous-member" is first refused a group lock: it waits for the
// lock while "previous-member" holds it.
type refusedLock struct {
	*inmemory.Backend
	once    sync.Once
	refused chan struct{}
}

func (r *refusedLock) LockGroup(ctx context.Context, topic, group, holder string, ttl time.Duration) (bool, bool, error) {
	held, takeover, err := r.Backend.LockGroup(ctx, topic, group, holder, ttl)
	if err == nil && !held && holder != "previous-member" {
		r.once.Do(func() { close(r.refused) })
	}
	return held, takeover, err
}

// A member that takes a lock the previous holder released while it
// waited, with a delivery of that holder still unsettled at the broker
// (a read whose reply it gave up on took it: no handler had it), holds
// only that delivery's key, as after a takeover: the other keys run at
// once, not an ack timeout later, and the held key's delivery comes back
// after its lease and runs before the rest of its key.
func TestKeyOrderingReleasedLockHoldsOnlyThePendingKeys(t *testing.T) {
	const lease = 4 * time.Second
	raw, err := inmemory.New(nil)
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, raw.Publish(ctx, "orders", []*backend.Message{{ID: "k-0", Key: "k"}}))
	prev, err := raw.Subscribe(ctx, "orders", backend.SubscribeConfig{Group: "g", StartFrom: bus.StartOldest, AckTimeout: lease, Observer: observer.Nop()})
	require.NoError(t, err)
	defer prev.Close()
	held, _, err := raw.LockGroup(ctx, "orders", "g", "previous-member", time.Minute)
	require.NoError(t, err)
	require.True(t, held)
	taken, err := prev.Receive(ctx, 1)
	require.NoError(t, err)
	require.Len(t, taken, 1, "the previous holder's lost read took k-0")
	be := &refusedLock{Backend: raw, refused: make(chan struct{})}
	b := bus.New(be, bus.WithObserver(observer.Nop()))
	defer closeBus(t, b)
	type handled struct {
		id string
		at time.Time
	}
	handledCh := make(chan handled, 8)
	_, err = b.Subscribe(ctx, "orders", func(ctx context.Context, d *bus.Delivery) error {
		handledCh <- handled{d.ID, time.Now()}
		return nil
	}, bus.WithGroup("g"), bus.WithKeyOrdering(), bus.WithAckTimeout(lease))
	require.NoError(t, err)
	select {
	case <-be.refused:
	case <-time.After(10 * time.Second):
		t.Fatal("the member never asked for the held lock")
	}
	start := time.Now()
	require.NoError(t, raw.UnlockGroup(ctx, "orders", "g", "previous-member"))
	require.NoError(t, b.Publish(ctx, "orders", &bus.Message{ID: "k-1", Key: "k"}, &bus.Message{ID: "j-0", Key: "j"}))
	var got []handledAt
	for len(got) < 3 {
		select {
		case x := <-handledCh:
			got = append(got, handledAt{id: x.id, at: x.at.Sub(start)})
		case <-time.After(10 * time.Second):
			t.Fatalf("handled only %v", got)
		}
	}
	assert.Equal(t, "j-0", got[0].id, "the other key runs first: %v", got)
	assert.Less(t, got[0].at, lease/2, "the other key does not wait for the lease: %v", got)
	assert.Equal(t, "k-0", got[1].id, "the previous holder's delivery comes back first: %v", got)
	assert.Equal(t, "k-1", got[2].id, "then the rest of its key: %v", got)
}

// handledAt is a delivery a test's handler saw, and when.
type handledAt struct {
	id      string
	attempt int
	at      time.Duration
}

// takeOver subscribes a key-ordered member of group g of "orders" on be
// (whose lock a crashed member let lapse), publishes k-1 and j-0, and
// returns the first n deliveries it handles.
func takeOver(t *testing.T, be backend.Backend, lease time.Duration, n int, opts ...bus.SubscribeOption) []handledAt {
	t.Helper()
	return takeOverWith(t, be, lease, n, []*bus.Message{{ID: "k-1", Key: "k"}, {ID: "j-0", Key: "j"}}, opts...)
}

// takeOverWith is takeOver publishing msgs.
func takeOverWith(t *testing.T, be backend.Backend, lease time.Duration, n int, msgs []*bus.Message, opts ...bus.SubscribeOption) []handledAt {
	t.Helper()
	ctx := context.Background()
	b := bus.New(be, bus.WithObserver(observer.Nop()))
	defer closeBus(t, b)
	start := time.Now()
	handled := make(chan handledAt, 8)
	_, err := b.Subscribe(ctx, "orders", func(ctx context.Context, d *bus.Delivery) error {
		select {
		case handled <- handledAt{d.ID, d.Attempt, time.Since(start)}:
		default:
		}
		return nil
	}, append([]bus.SubscribeOption{bus.WithGroup("g"), bus.WithKeyOrdering(), bus.WithAckTimeout(lease)}, opts...)...)
	require.NoError(t, err)
	require.NoError(t, b.Publish(ctx, "orders", msgs...))
	var got []handledAt
	for len(got) < n {
		select {
		case x := <-handled:
			got = append(got, x)
		case <-time.After(10 * time.Second):
			t.Fatalf("handled only %v", got)
		}
	}
	return got
}

// When the deliveries waiting behind a held key fill the waiting set, so
// that nothing more is fetched, they go back to the group once the held
// delivery's lease has ended, and the fetch that brings it back runs:
// the key stays in order, and the other keys run.
func TestKeyOrderingHeldKeyThatFillsTheWaitingSetGoesBack(t *testing.T) {
	const lease = 2 * time.Second
	be := crashedGroup(t, lease)
	got := takeOverWith(t, be, lease, 4, []*bus.Message{{ID: "k-1", Key: "k"}, {ID: "k-2", Key: "k"}, {ID: "k-3", Key: "k"}, {ID: "j-0", Key: "j"}},
		bus.WithMaxWaiting(2), bus.WithMaxInFlight(1))
	var ks []string
	for _, x := range got {
		if strings.HasPrefix(x.id, "k-") {
			ks = append(ks, x.id)
		}
	}
	assert.Equal(t, []string{"k-0", "k-1", "k-2"}, ks[:3], "key k in order: %v", got)
}

// flakyLockBackend is a wrappingBackend whose group lock fails (as when
// the broker does not answer in time) for its next fails calls.
type flakyLockBackend struct {
	*wrappingBackend
	fails atomic.Int32
}

func (b *flakyLockBackend) LockGroup(ctx context.Context, topic, group, holder string, ttl time.Duration) (bool, bool, error) {
	if b.fails.Add(-1) >= 0 {
		return false, false, errors.New("lock group: timeout")
	}
	return b.wrappingBackend.LockGroup(ctx, topic, group, holder, ttl)
}

// A member that took the group lock over from a crashed one, and then
// could not renew it in time (so that it fenced itself and dropped its
// holds), takes it again as a takeover, although the lock never passed to
// anyone else: it holds the crashed member's pending key again, whose
// delivery comes back after its lease and runs before the rest of its
// key.
func TestKeyOrderingTakeoverThatLosesTheLockHoldsAgain(t *testing.T) {
	const lease = 5 * time.Second
	raw := crashedGroup(t, lease)
	be := &flakyLockBackend{}
	// Once the takeover has listed what is pending (and holds k), two
	// renewals in a row fail: two thirds of the lock's ttl without one,
	// more than the half after which the member fences itself.
	be.wrappingBackend = settlingBackend(raw, func() { be.fails.Store(2) })
	got := takeOver(t, be, lease, 3)
	var ks []handledAt
	for _, x := range got {
		if strings.HasPrefix(x.id, "k-") {
			ks = append(ks, x)
		}
	}
	require.NotEmpty(t, ks, "key k handled: %v", got)
	assert.Equal(t, "k-0", ks[0].id, "the crashed member's delivery comes back first: %v", got)
	assert.Equal(t, 2, ks[0].attempt, "k-0 is a redelivery: %v", got)
}

// failingList wraps in-memory subscriptions so that they fail the first
// *fails lists of pending deliveries between them.
func failingList(fails *atomic.Int32) func(*inmemory.Subscription) backend.Subscription {
	return func(sub *inmemory.Subscription) backend.Subscription {
		return &failingListSub{Subscription: sub, fails: fails}
	}
}

type failingListSub struct {
	*inmemory.Subscription
	fails *atomic.Int32
}

func (s *failingListSub) PendingDeliveries(ctx context.Context, max int) ([]backend.Pending, bool, error) {
	if s.fails.Add(-1) >= 0 {
		return nil, false, context.DeadlineExceeded
	}
	return s.Subscription.PendingDeliveries(ctx, max)
}

// A takeover whose list of pending deliveries fails (a slow broker) asks
// for it again instead of waiting one ack timeout: the other key runs
// before the crashed member's lease ends, the held one after it.
func TestKeyOrderingTakeoverAsksAgainForAFailedList(t *testing.T) {
	const lease = 4 * time.Second
	raw := crashedGroup(t, lease)
	var fails atomic.Int32
	fails.Store(2)
	got := takeOver(t, &wrappingBackend{Backend: raw, wrap: failingList(&fails)}, lease, 3)
	assert.Equal(t, "j-0", got[0].id, "the other key runs first: %v", got)
	assert.Less(t, got[0].at, lease, "the other key does not wait for the lease: %v", got)
	assert.Equal(t, "k-0", got[1].id, "the crashed member's delivery comes back first: %v", got)
	assert.Equal(t, "k-1", got[2].id, "then the rest of its key: %v", got)
	assert.Less(t, fails.Load(), int32(0), "the list was asked for again")
}

// reversing wraps an in-memory subscription so that, once it gave a
// delivery back (Release), it hands out each batch in reverse order: what
// goes back to the group need not come back in log order.
func reversing(sub *inmemory.Subscription) backend.Subscription {
	return &reversingSub{Subscription: sub}
}

type reversingSub struct {
	*inmemory.Subscription
	released atomic.Bool
}

func (s *reversingSub) Release(ctx context.Context, id backend.AckID) error {
	s.released.Store(true)
	return s.Subscription.Release(ctx, id)
}

func (s *reversingSub) Receive(ctx context.Context, max int) ([]*backend.Message, error) {
	ms, err := s.Subscription.Receive(ctx, max)
	if s.released.Load() {
		slices.Reverse(ms)
	}
	return ms, err
}

// The deliveries waiting behind a held key that go back to the group
// when they fill the waiting set run in their order when they come back,
// whatever order the backend hands them out in.
func TestKeyOrderingHeldKeyGivenBackKeepsItsOrder(t *testing.T) {
	const lease = 2 * time.Second
	raw := crashedGroup(t, lease)
	got := takeOverWith(t, &wrappingBackend{Backend: raw, wrap: reversing}, lease, 5, []*bus.Message{{ID: "k-1", Key: "k"}, {ID: "k-2", Key: "k"}, {ID: "k-3", Key: "k"}, {ID: "j-0", Key: "j"}},
		bus.WithMaxWaiting(2), bus.WithMaxInFlight(1))
	var ks []string
	for _, x := range got {
		if strings.HasPrefix(x.id, "k-") {
			ks = append(ks, x.id)
		}
	}
	assert.Equal(t, []string{"k-0", "k-1", "k-2", "k-3"}, ks, "key k in order: %v", got)
}

// keyOwningBackend is an in-memory backend that declares
// Capabilities.KeyOwnership, counts the group-lock calls made of it and
// the Receives of each of its subscriptions.
type keyOwningBackend struct {
	*inmemory.Backend
	locks    atomic.Int32
	mu       sync.Mutex
	receives []*atomic.Int32
}

func (b *keyOwningBackend) Capabilities() backend.Capabilities {
	c := b.Backend.Capabilities()
	c.KeyOwnership = true
	return c
}

func (b *keyOwningBackend) LockGroup(ctx context.Context, topic, group, holder string, ttl time.Duration) (bool, bool, error) {
	b.locks.Add(1)
	return b.Backend.LockGroup(ctx, topic, group, holder, ttl)
}

func (b *keyOwningBackend) Subscribe(ctx context.Context, topic string, cfg backend.SubscribeConfig) (backend.Subscription, error) {
	sub, err := b.Backend.Subscribe(ctx, topic, cfg)
	if err != nil {
		return nil, err
	}
	n := &atomic.Int32{}
	b.mu.Lock()
	b.receives = append(b.receives, n)
	b.mu.Unlock()
	return &receiveCounter{Subscription: sub.(*inmemory.Subscription), n: n}, nil
}

// receivers returns how many of the subscriptions have called Receive.
func (b *keyOwningBackend) receivers() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, r := range b.receives {
		if r.Load() > 0 {
			n++
		}
	}
	return n
}

type receiveCounter struct {
	*inmemory.Subscription
	n *atomic.Int32
}

func (s *receiveCounter) Receive(ctx context.Context, max int) ([]*backend.Message, error) {
	s.n.Add(1)
	return s.Subscription.Receive(ctx, max)
}

// On a backend whose assignment keeps each key on one member
// (Capabilities.KeyOwnership), the members of a key-ordered group take no
// group lock, even when the backend is a GroupLocker: every member
// fetches.
func TestKeyOrderingWithKeyOwnershipTakesNoGroupLock(t *testing.T) {
	raw, err := inmemory.New(nil)
	require.NoError(t, err)
	be := &keyOwningBackend{Backend: raw}
	b := bus.New(be, bus.WithObserver(observer.Nop()))
	defer closeBus(t, b)
	handled := make(chan string, 8)
	for range 2 {
		_, err := b.Subscribe(context.Background(), "orders", func(_ context.Context, d *bus.Delivery) error {
			handled <- d.ID
			return nil
		}, bus.WithGroup("g"), bus.WithKeyOrdering())
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return be.receivers() == 2 }, 10*time.Second, 5*time.Millisecond,
		"both members of the key-ordered group fetch")
	require.NoError(t, b.Publish(context.Background(), "orders", &bus.Message{ID: "k-0", Key: "k"}))
	select {
	case id := <-handled:
		assert.Equal(t, "k-0", id)
	case <-time.After(10 * time.Second):
		t.Fatal("k-0 was not handled")
	}
	assert.Zero(t, be.locks.Load(), "no group lock taken with KeyOwnership")
}

// failingDeadLetterSub is an in-memory subscription whose DeadLetter
// fails (as when the broker does not confirm in time) for its next fails
// calls.
type failingDeadLetterSub struct {
	*inmemory.Subscription
	fails *atomic.Int32
}

func (s *failingDeadLetterSub) DeadLetter(ctx context.Context, id backend.AckID, topic string, msg *backend.Message) error {
	if s.fails.Add(-1) >= 0 {
		return errors.New("dead-letter: no confirm in time")
	}
	return s.Subscription.DeadLetter(ctx, id, topic, msg)
}

// A key's head whose move to the dead-letter topic fails keeps its key:
// it is delivered again, uncounted, before the key's next message runs,
// until its move succeeds; it is dead-lettered once.
func TestKeyOrderingHeadWhoseDeadLetterFailsKeepsItsKey(t *testing.T) {
	var fails atomic.Int32
	fails.Store(2)
	b, log := poisonedKey(t, func(sub *inmemory.Subscription) backend.Subscription {
		return &failingDeadLetterSub{Subscription: sub, fails: &fails}
	})
	require.Eventually(t, func() bool { return log.len() >= 5 }, 20*time.Second, 5*time.Millisecond)
	assert.Equal(t, []string{"k/0#1", "k/0#1", "k/0#1", "k/1#1", "k/2#1"}, log.list(),
		"the head runs again after each failed move, before the rest of its key")
	requireOneDeadLetter(t, b)
}

// poisonedKey subscribes, on an in-memory backend whose subscriptions
// wrap wraps, a key-ordered handler that rejects k/0 and logs every
// delivery, and publishes k/0, k/1 and k/2.
func poisonedKey(t *testing.T, wrap func(*inmemory.Subscription) backend.Subscription, opts ...bus.SubscribeOption) (*bus.Bus, *orderLog) {
	t.Helper()
	raw, err := inmemory.New(nil)
	require.NoError(t, err)
	b := bus.New(&wrappingBackend{Backend: raw, wrap: wrap}, bus.WithObserver(observer.Nop()))
	t.Cleanup(func() { closeBus(t, b) })
	log := &orderLog{}
	opts = append([]bus.SubscribeOption{bus.WithKeyOrdering(), bus.WithDeadLetter("orders.dlq"), bus.WithMaxInFlight(8)}, opts...)
	_, err = b.Subscribe(context.Background(), "orders", func(ctx context.Context, d *bus.Delivery) error {
		log.add(d)
		if string(d.Payload) == "k/0" {
			return bus.Reject(errors.New("poisoned"))
		}
		return nil
	}, opts...)
	require.NoError(t, err)
	require.NoError(t, b.Publish(context.Background(), "orders", keyedMsgs("k", 3)...))
	return b, log
}

// requireOneDeadLetter checks that k/0 is on orders.dlq once.
func requireOneDeadLetter(t *testing.T, b *bus.Bus) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dls, err := b.DeadLetters(ctx, "orders.dlq", 0)
	require.NoError(t, err)
	require.Len(t, dls, 1, "the head is dead-lettered once")
	assert.Equal(t, "k/0", string(dls[0].Payload))
}

// slowDeadLetterSub is an in-memory subscription whose DeadLetter takes
// hold to complete, as a broker slow to confirm the copy.
type slowDeadLetterSub struct {
	*inmemory.Subscription
	hold time.Duration
}

func (s *slowDeadLetterSub) DeadLetter(ctx context.Context, id backend.AckID, topic string, msg *backend.Message) error {
	t := time.NewTimer(s.hold)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.Subscription.DeadLetter(ctx, id, topic, msg)
}

// A delivery whose dead-lettering takes several ack timeouts keeps its
// lease meanwhile: it is not delivered again, and its key's next message
// runs after it was moved.
func TestKeyOrderingSlowDeadLetterKeepsTheLease(t *testing.T) {
	b, log := poisonedKey(t, func(sub *inmemory.Subscription) backend.Subscription {
		return &slowDeadLetterSub{Subscription: sub, hold: 1500 * time.Millisecond}
	}, bus.WithAckTimeout(300*time.Millisecond))
	require.Eventually(t, func() bool { return log.len() >= 3 }, 20*time.Second, 5*time.Millisecond)
	requireOneDeadLetter(t, b)
	assert.Equal(t, []string{"k/0#1", "k/1#1", "k/2#1"}, log.list(), "the head is not delivered again while it is being moved")
}

// leaseTrap is an in-memory backend whose subscriptions refuse to extend
// the lease of the first delivery of the message with ID lose, so that it
// is lost while the delivery waits behind its key's head; with drop set,
// they also hide the message's redeliveries (acked as they come), as if
// it had left the stream. Without listed, its subscriptions cannot list
// what is pending (backend.PendingLister).
type leaseTrap struct {
	*inmemory.Backend
	lose         string
	drop, listed bool
}

func (b *leaseTrap) Subscribe(ctx context.Context, topic string, cfg backend.SubscribeConfig) (backend.Subscription, error) {
	sub, err := b.Backend.Subscribe(ctx, topic, cfg)
	if err != nil {
		return nil, err
	}
	trap := &leaseTrapSub{Subscription: sub.(*inmemory.Subscription), trap: b, refused: map[backend.AckID]bool{}}
	if b.listed {
		return listedTrapSub{trap}, nil
	}
	return trap, nil
}

type leaseTrapSub struct {
	*inmemory.Subscription
	trap    *leaseTrap
	mu      sync.Mutex
	refused map[backend.AckID]bool
}

// listedTrapSub is a leaseTrapSub that lists what is pending.
type listedTrapSub struct{ *leaseTrapSub }

func (s listedTrapSub) PendingDeliveries(ctx context.Context, max int) ([]backend.Pending, bool, error) {
	return s.Subscription.PendingDeliveries(ctx, max)
}

func (s *leaseTrapSub) Receive(ctx context.Context, max int) ([]*backend.Message, error) {
	msgs, err := s.Subscription.Receive(ctx, max)
	s.mu.Lock()
	defer s.mu.Unlock()
	kept := msgs[:0]
	for _, m := range msgs {
		switch {
		case m.ID != s.trap.lose:
		case m.Attempt <= 1:
			s.refused[m.AckID] = true
		case s.trap.drop:
			_ = s.Subscription.Ack(ctx, []backend.AckID{m.AckID})
			continue
		}
		kept = append(kept, m)
	}
	return kept, err
}

func (s *leaseTrapSub) Extend(ctx context.Context, id backend.AckID) error {
	s.mu.Lock()
	refused := s.refused[id]
	s.mu.Unlock()
	if refused {
		return errors.New("the broker does not answer")
	}
	return s.Subscription.Extend(ctx, id)
}

// PendingDeliveries hides the in-memory subscription's (see
// listedTrapSub).
func (*leaseTrapSub) PendingDeliveries() {}

// runLeaseTrap subscribes a key-ordered group to be, publishes k/0, k/1
// and k/2 with k/1's lease lost while it waits behind k/0, which runs
// until then, and returns the handler's order log and the events that
// say a key went on without its lost delivery.
func runLeaseTrap(t *testing.T, be *leaseTrap, lease time.Duration) (*orderLog, <-chan error) {
	t.Helper()
	msgs := keyedMsgs("k", 3)
	for i, m := range msgs {
		m.ID = fmt.Sprintf("id-%d", i)
	}
	be.lose = msgs[1].ID
	lost, expired := make(chan struct{}), make(chan error, 1)
	var once sync.Once
	b := bus.New(be, bus.WithObserver(observer.Func(func(_ context.Context, e observer.Event) {
		if e.Scope == observer.ScopeLease && e.MessageID == be.lose && e.Err != nil {
			if strings.Contains(e.Err.Error(), "to come back") {
				expired <- e.Err
			} else {
				once.Do(func() { close(lost) })
			}
		}
	})))
	t.Cleanup(func() { closeBus(t, b) })
	log := &orderLog{}
	_, err := b.Subscribe(context.Background(), "orders", func(ctx context.Context, d *bus.Delivery) error {
		if string(d.Payload) == "k/0" {
			select {
			case <-lost:
			case <-time.After(10 * time.Second):
				t.Error("k/1's lease was never lost")
			}
		}
		log.add(d)
		return nil
	}, bus.WithGroup("g"), bus.WithKeyOrdering(), bus.WithAckTimeout(lease))
	require.NoError(t, err)
	require.NoError(t, b.Publish(context.Background(), "orders", msgs...))
	return log, expired
}

// A delivery whose lease is lost while it waits behind its key's head
// (the broker did not answer the extension) holds its key until the
// backend delivers it again: the key's next message runs after it, on a
// backend that lists what is pending and on one that cannot.
func TestKeyOrderingLostLeaseOfAWaitingDeliveryHoldsItsKey(t *testing.T) {
	for _, listed := range []bool{true, false} {
		t.Run(fmt.Sprintf("listed=%v", listed), func(t *testing.T) {
			mem, err := inmemory.New(nil)
			require.NoError(t, err)
			log, _ := runLeaseTrap(t, &leaseTrap{Backend: mem, listed: listed}, 300*time.Millisecond)
			require.Eventually(t, func() bool { return log.len() >= 3 }, 10*time.Second, 5*time.Millisecond)
			assert.Equal(t, []string{"k/0#1", "k/1#2", "k/2#1"}, log.list())
		})
	}
}

// A key that waits for a delivery whose lease was lost goes on without it
// when it does not come back (it left the stream): two ack timeouts and
// 1.5 s later its next message runs, and an event says why.
func TestKeyOrderingLostLeaseThatNeverComesBackFreesItsKey(t *testing.T) {
	mem, err := inmemory.New(nil)
	require.NoError(t, err)
	const lease = 300 * time.Millisecond
	log, expired := runLeaseTrap(t, &leaseTrap{Backend: mem, drop: true}, lease)
	require.Eventually(t, func() bool { return log.len() >= 1 }, 10*time.Second, 5*time.Millisecond)
	start := time.Now()
	require.Eventually(t, func() bool { return log.len() >= 2 }, 10*time.Second, 5*time.Millisecond)
	assert.GreaterOrEqual(t, time.Since(start), 1500*time.Millisecond, "the key waited for the lost delivery")
	assert.Equal(t, []string{"k/0#1", "k/2#1"}, log.list())
	select {
	case err := <-expired:
		assert.ErrorContains(t, err, `key "k" waited`)
	case <-time.After(5 * time.Second):
		t.Fatal("no event says why the key went on")
	}
}
