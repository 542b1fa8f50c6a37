package bus_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/inmemory"
	"github.com/eventbus-go/bus/observer"
)

// blindMember is a member whose backend cannot report a group's figures
// (no backend.Inspector), as RabbitMQ without its management API; its
// subscriptions still list what they hold (backend.PendingLister).
// refused, when not nil, is closed the first time it is refused a group
// lock that another member holds.
type blindMember struct {
	be      *inmemory.Backend
	refused chan struct{}
	once    *sync.Once
}

func (m blindMember) Publish(ctx context.Context, topic string, msgs []*backend.Message) error {
	return m.be.Publish(ctx, topic, msgs)
}

func (m blindMember) Subscribe(ctx context.Context, topic string, cfg backend.SubscribeConfig) (backend.Subscription, error) {
	return m.be.Subscribe(ctx, topic, cfg)
}

func (m blindMember) Capabilities() backend.Capabilities { return m.be.Capabilities() }

func (m blindMember) LockGroup(ctx context.Context, topic, group, holder string, ttl time.Duration) (bool, bool, error) {
	held, takeover, err := m.be.LockGroup(ctx, topic, group, holder, ttl)
	if err == nil && !held && m.refused != nil {
		m.once.Do(func() { close(m.refused) })
	}
	return held, takeover, err
}

func (m blindMember) UnlockGroup(ctx context.Context, topic, group, holder string) error {
	return m.be.UnlockGroup(ctx, topic, group, holder)
}

// Close leaves the shared broker open for the other member.
func (blindMember) Close() error { return nil }

// A member that takes a lock its holder released on a clean Close starts
// once the handover has settled and its subscription listed nothing
// pending, also on a backend that cannot report the group's figures: it
// does not wait out the ack timeout, while messages keep coming.
func TestKeyOrderingCleanCloseHandsOverWithoutGroupFigures(t *testing.T) {
	be, err := inmemory.New(nil)
	require.NoError(t, err)
	defer be.Close()
	const lease = 20 * time.Second
	ctx := context.Background()
	var mu sync.Mutex
	var order []string
	record := func(d *bus.Delivery) {
		mu.Lock()
		order = append(order, string(d.Payload))
		mu.Unlock()
	}
	opts := []bus.SubscribeOption{bus.WithGroup("g"), bus.WithKeyOrdering(), bus.WithAckTimeout(lease)}
	first := bus.New(blindMember{be: be}, bus.WithObserver(observer.Nop()))
	defer closeBus(t, first)
	handled := make(chan struct{}, 16)
	sub, err := first.Subscribe(ctx, "orders", func(_ context.Context, d *bus.Delivery) error {
		record(d)
		handled <- struct{}{}
		return nil
	}, opts...)
	require.NoError(t, err)
	require.NoError(t, first.Publish(ctx, "orders", keyedMsgs("k", 3)...))
	for range 3 {
		select {
		case <-handled:
		case <-time.After(10 * time.Second):
			t.Fatal("the first member did not handle the first messages")
		}
	}
	refused := make(chan struct{})
	second := bus.New(blindMember{be: be, refused: refused, once: new(sync.Once)}, bus.WithObserver(observer.Nop()))
	defer closeBus(t, second)
	took := make(chan time.Time, 16)
	_, err = second.Subscribe(ctx, "orders", func(_ context.Context, d *bus.Delivery) error {
		record(d)
		took <- time.Now()
		return nil
	}, opts...)
	require.NoError(t, err)
	select {
	case <-refused: // the second member waits for the lock
	case <-time.After(10 * time.Second):
		t.Fatal("the second member never asked for the lock")
	}
	require.NoError(t, sub.Close(ctx), "close the first member")
	assertNextMemberRunsK3(t, first, took, lease, &mu, &order, "the key stays in order across the handover")
}

// assertNextMemberRunsK3 publishes k/3 through b after a member of a
// key-ordered group closed, and asserts that the next member, which sends
// the time of each start on took, runs it well within the ack timeout
// lease, and that the key ran k/0 to k/3 in order (order, under mu).
func assertNextMemberRunsK3(t *testing.T, b *bus.Bus, took <-chan time.Time, lease time.Duration, mu *sync.Mutex, order *[]string, inOrder string) {
	t.Helper()
	begin := time.Now()
	require.NoError(t, b.Publish(context.Background(), "orders", &bus.Message{Key: "k", Payload: []byte("k/3")}))
	select {
	case at := <-took:
		assert.Less(t, at.Sub(begin), lease/4, "the next member starts well within the ack timeout")
	case <-time.After(lease / 2):
		t.Fatal("the next member did not take over within half the ack timeout")
	}
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"k/0", "k/1", "k/2", "k/3"}, *order, inOrder)
}

// uncleanClose is a member whose subscriptions report that their Close
// could not give back everything they took (a read given up on took a
// delivery that is still pending to them). Once its reads are stopped
// (stopReads), a Receive waits for its ctx without reading, so that a
// message published then is left to the test's own read.
type uncleanClose struct {
	*inmemory.Backend
	reads *readGate
}

// readGate stops a member's reads: a Receive reads under mu held for
// reading, and stopReads takes it for writing, so it returns once the
// read under way has (the backend's Receive waits a second at most).
type readGate struct {
	mu      sync.RWMutex
	stopped bool
}

func (g *readGate) stopReads() {
	g.mu.Lock()
	g.stopped = true
	g.mu.Unlock()
}

func (u uncleanClose) Subscribe(ctx context.Context, topic string, cfg backend.SubscribeConfig) (backend.Subscription, error) {
	sub, err := u.Backend.Subscribe(ctx, topic, cfg)
	if err != nil {
		return nil, err
	}
	return uncleanSub{sub, u.reads}, nil
}

// Close leaves the shared broker open for the other member.
func (uncleanClose) Close() error { return nil }

type uncleanSub struct {
	backend.Subscription
	reads *readGate
}

func (s uncleanSub) Receive(ctx context.Context, max int) ([]*backend.Message, error) {
	s.reads.mu.RLock()
	if s.reads.stopped {
		s.reads.mu.RUnlock()
		<-ctx.Done()
		return nil, ctx.Err()
	}
	defer s.reads.mu.RUnlock()
	return s.Subscription.Receive(ctx, max)
}

func (s uncleanSub) Close() error {
	_ = s.Subscription.Close()
	return errors.New("give back what a read given up on took: server paused (it comes back after its lease)")
}

// A member whose Close could not give back what it took lets the group
// lock lapse instead of releasing it: a member that asks for the lock
// only later takes it over and holds back the key of what is still
// pending, so the key's later message does not run before it comes back.
func TestKeyOrderingUncleanCloseLetsTheLockLapse(t *testing.T) {
	const lease = 4 * time.Second
	raw, err := inmemory.New(nil)
	require.NoError(t, err)
	defer raw.Close()
	ctx := context.Background()
	opts := []bus.SubscribeOption{bus.WithGroup("g"), bus.WithKeyOrdering(), bus.WithAckTimeout(lease)}
	reads := &readGate{}
	first := bus.New(uncleanClose{raw, reads}, bus.WithObserver(observer.Nop()))
	defer closeBus(t, first)
	ran := make(chan struct{}, 1)
	sub, err := first.Subscribe(ctx, "orders", func(context.Context, *bus.Delivery) error {
		ran <- struct{}{}
		return nil
	}, opts...)
	require.NoError(t, err)
	require.NoError(t, first.Publish(ctx, "orders", &bus.Message{ID: "a-0", Key: "a"}))
	select {
	case <-ran: // the first member holds the lock and fetches
	case <-time.After(10 * time.Second):
		t.Fatal("the first member never ran")
	}
	// What the first member's lost read took: k-0, pending in the group.
	// The member reads no more, so that the test's read takes it.
	reads.stopReads()
	require.NoError(t, raw.Publish(ctx, "orders", []*backend.Message{{ID: "k-0", Key: "k"}}))
	lost, err := raw.Subscribe(ctx, "orders", backend.SubscribeConfig{Group: "g", AckTimeout: lease, Observer: observer.Nop()})
	require.NoError(t, err)
	defer lost.Close()
	taken, err := lost.Receive(ctx, 1)
	require.NoError(t, err)
	require.Len(t, taken, 1, "the lost read took k-0")
	start := time.Now()
	require.Error(t, sub.Close(ctx), "the close says what it could not give back")

	second := bus.New(member{raw}, bus.WithObserver(observer.Nop()))
	defer closeBus(t, second)
	handledCh := make(chan handledAt, 8)
	_, err = second.Subscribe(ctx, "orders", func(_ context.Context, d *bus.Delivery) error {
		handledCh <- handledAt{id: d.ID, at: time.Since(start)}
		return nil
	}, opts...)
	require.NoError(t, err)
	require.NoError(t, second.Publish(ctx, "orders", &bus.Message{ID: "k-1", Key: "k"}, &bus.Message{ID: "j-0", Key: "j"}))
	var got []handledAt
	for len(got) < 3 {
		select {
		case x := <-handledCh:
			got = append(got, x)
		case <-time.After(10 * time.Second):
			t.Fatalf("handled only %v", got)
		}
	}
	assert.Equal(t, "j-0", got[0].id, "the other key runs first: %v", got)
	assert.Equal(t, "k-0", got[1].id, "the delivery the first member left comes back before the rest of its key: %v", got)
	assert.Equal(t, "k-1", got[2].id, "then the rest of its key: %v", got)
}

// unlockWatch is a member that records whether it released a group lock.
type unlockWatch struct {
	*inmemory.Backend
	unlocked chan struct{}
	once     sync.Once
}

func (u *unlockWatch) UnlockGroup(ctx context.Context, topic, group, holder string) error {
	u.once.Do(func() { close(u.unlocked) })
	return u.Backend.UnlockGroup(ctx, topic, group, holder)
}

// Close leaves the shared broker open for the other member.
func (*unlockWatch) Close() error { return nil }

// A member whose handler outlives its Close leaves that delivery to its
// lease: its close is not clean, so it lets the group lock lapse instead
// of releasing it, and the next holder takes the lock over (and waits
// for what is left) rather than taking a released one.
func TestKeyOrderingCloseThatHandlersOutliveLetsTheLockLapse(t *testing.T) {
	raw, err := inmemory.New(nil)
	require.NoError(t, err)
	defer raw.Close()
	ctx := context.Background()
	watch := &unlockWatch{Backend: raw, unlocked: make(chan struct{})}
	b := bus.New(watch, bus.WithObserver(observer.Nop()))
	defer closeBus(t, b)
	running, stuck := make(chan struct{}, 1), make(chan struct{})
	defer close(stuck)
	sub, err := b.Subscribe(ctx, "orders", func(context.Context, *bus.Delivery) error {
		running <- struct{}{}
		<-stuck // ignores its ctx: it outlives the Close
		return nil
	}, bus.WithGroup("g"), bus.WithKeyOrdering(), bus.WithAckTimeout(4*time.Second))
	require.NoError(t, err)
	require.NoError(t, b.Publish(ctx, "orders", &bus.Message{Key: "k", Payload: []byte("k/0")}))
	select {
	case <-running:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler never ran")
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	require.Error(t, sub.Close(short), "the Close says a handler still runs")
	select {
	case <-watch.unlocked:
		t.Fatal("the member released the lock although its handler outlived the Close")
	default:
	}
	require.Eventually(t, func() bool {
		held, takeover, err := raw.LockGroup(ctx, "orders", "g", "next", time.Minute)
		require.NoError(t, err)
		if held {
			assert.True(t, takeover, "the next holder takes the lock over")
		}
		return held
	}, 10*time.Second, 10*time.Millisecond, "the lock lapses")
}

// A member that took the group lock over and closes while a key still
// waits for a delivery the member before it left unsettled (a crashed
// member's, out on its lease) lets the lock lapse instead of releasing
// it: the next member, even one that asks for the lock only after the
// close, takes it over and holds the key back until that delivery comes
// back, so the key's later messages (given back by the closing member,
// or published after) do not run before it.
func TestKeyOrderingCloseWithAHeldKeyLetsTheLockLapse(t *testing.T) {
	const lease = 6 * time.Second
	raw, err := inmemory.New(nil)
	require.NoError(t, err)
	defer raw.Close()
	ctx := context.Background()
	// The crashed member: it held the lock, which lapses at once, and
	// took k-0, which stays pending on its lease.
	held, _, err := raw.LockGroup(ctx, "orders", "g", "crashed", time.Millisecond)
	require.NoError(t, err)
	require.True(t, held)
	crashed, err := raw.Subscribe(ctx, "orders", backend.SubscribeConfig{Group: "g", AckTimeout: lease, Observer: observer.Nop()})
	require.NoError(t, err)
	defer crashed.Close()
	require.NoError(t, raw.Publish(ctx, "orders", []*backend.Message{{ID: "k-0", Key: "k"}}))
	taken, err := crashed.Receive(ctx, 1)
	require.NoError(t, err)
	require.Len(t, taken, 1, "the crashed member took k-0")

	var mu sync.Mutex
	var order []string
	handled := make(chan string, 8)
	h := func(_ context.Context, d *bus.Delivery) error {
		mu.Lock()
		order = append(order, d.ID)
		mu.Unlock()
		handled <- d.ID
		return nil
	}
	opts := []bus.SubscribeOption{bus.WithGroup("g"), bus.WithKeyOrdering(), bus.WithAckTimeout(lease)}
	watch := &unlockWatch{Backend: raw, unlocked: make(chan struct{})}
	first := bus.New(watch, bus.WithObserver(observer.Nop()))
	defer closeBus(t, first)
	sub, err := first.Subscribe(ctx, "orders", h, opts...)
	require.NoError(t, err)
	require.NoError(t, raw.Publish(ctx, "orders", []*backend.Message{{ID: "k-1", Key: "k"}, {ID: "j-0", Key: "j"}}))
	select {
	case id := <-handled:
		require.Equal(t, "j-0", id, "the first member holds k back and runs j")
	case <-time.After(10 * time.Second):
		t.Fatal("the first member never ran")
	}
	waitPending(t, raw, 2, "the first member fetched k-1, which waits behind the held k-0")
	require.NoError(t, sub.Close(ctx))
	select {
	case <-watch.unlocked:
		t.Fatal("the member released the lock although a key still waited for a held delivery")
	default:
	}

	second := bus.New(member{raw}, bus.WithObserver(observer.Nop()))
	defer closeBus(t, second)
	_, err = second.Subscribe(ctx, "orders", h, opts...)
	require.NoError(t, err)
	require.NoError(t, second.Publish(ctx, "orders", &bus.Message{ID: "k-2", Key: "k"}))
	for range 3 {
		select {
		case <-handled:
		case <-time.After(3 * lease):
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("handled only %v", order)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"j-0", "k-0", "k-1", "k-2"}, order, "k stays in order across the close")
}

// backFails is a member whose subscriptions cannot give one message back
// (Release and Nack fail for it, as over a link that drops): it stays
// pending, on its lease. It records whether it released a group lock.
type backFails struct {
	*inmemory.Backend
	id       string
	unlocked chan struct{}
	once     sync.Once
}

func (b *backFails) Subscribe(ctx context.Context, topic string, cfg backend.SubscribeConfig) (backend.Subscription, error) {
	sub, err := b.Backend.Subscribe(ctx, topic, cfg)
	if err != nil {
		return nil, err
	}
	return &backFailsSub{Subscription: sub.(*inmemory.Subscription), id: b.id}, nil
}

func (b *backFails) UnlockGroup(ctx context.Context, topic, group, holder string) error {
	b.once.Do(func() { close(b.unlocked) })
	return b.Backend.UnlockGroup(ctx, topic, group, holder)
}

// Close leaves the shared broker open for the other member.
func (*backFails) Close() error { return nil }

type backFailsSub struct {
	*inmemory.Subscription
	id   string
	mu   sync.Mutex
	acks []backend.AckID // of the message that cannot go back
}

var errBackLost = errors.New("give back: connection lost")

func (s *backFailsSub) Release(ctx context.Context, id backend.AckID) error {
	if s.is(id) {
		return errBackLost
	}
	return s.Subscription.Release(ctx, id)
}

func (s *backFailsSub) Nack(ctx context.Context, id backend.AckID, delay time.Duration) error {
	if s.is(id) {
		return errBackLost
	}
	return s.Subscription.Nack(ctx, id, delay)
}

func (s *backFailsSub) Receive(ctx context.Context, max int) ([]*backend.Message, error) {
	msgs, err := s.Subscription.Receive(ctx, max)
	for _, m := range msgs {
		if m.ID == s.id {
			s.mu.Lock()
			s.acks = append(s.acks, m.AckID)
			s.mu.Unlock()
		}
	}
	return msgs, err
}

func (s *backFailsSub) is(id backend.AckID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range s.acks {
		if a == id {
			return true
		}
	}
	return false
}

// A closing member that cannot give a key's head back (it stays pending
// on its lease) leaves the key's later deliveries to their leases too,
// instead of giving them back ahead of it, and lets the lock lapse: the
// next member runs the key in order.
func TestKeyOrderingHeadNotGivenBackKeepsTheRestBehindIt(t *testing.T) {
	const lease = 2 * time.Second
	raw, err := inmemory.New(nil)
	require.NoError(t, err)
	defer raw.Close()
	ctx := context.Background()
	opts := []bus.SubscribeOption{bus.WithGroup("g"), bus.WithKeyOrdering(), bus.WithAckTimeout(lease)}
	fails := &backFails{Backend: raw, id: "k-0", unlocked: make(chan struct{})}
	first := bus.New(fails, bus.WithObserver(observer.Nop()))
	defer closeBus(t, first)
	running := make(chan struct{}, 1)
	sub, err := first.Subscribe(ctx, "orders", func(ctx context.Context, d *bus.Delivery) error {
		running <- struct{}{}
		<-ctx.Done() // k-0 runs until the close gives up on it
		return ctx.Err()
	}, opts...)
	require.NoError(t, err)
	require.NoError(t, first.Publish(ctx, "orders", &bus.Message{ID: "k-0", Key: "k"}, &bus.Message{ID: "k-1", Key: "k"}, &bus.Message{ID: "k-2", Key: "k"}))
	select {
	case <-running:
	case <-time.After(10 * time.Second):
		t.Fatal("the first member never ran k-0")
	}
	waitPending(t, raw, 3, "k-1 and k-2 wait behind k-0 at the first member")
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_ = sub.Close(short) // the handler is cancelled; k-0 cannot be given back
	select {
	case <-fails.unlocked:
		t.Fatal("the member released the lock although k-0 is still pending on its lease")
	default:
	}

	second := bus.New(member{raw}, bus.WithObserver(observer.Nop()))
	defer closeBus(t, second)
	handled := make(chan string, 8)
	_, err = second.Subscribe(ctx, "orders", func(_ context.Context, d *bus.Delivery) error {
		handled <- d.ID
		return nil
	}, opts...)
	require.NoError(t, err)
	var got []string
	for len(got) < 3 {
		select {
		case id := <-handled:
			got = append(got, id)
		case <-time.After(5 * lease):
			t.Fatalf("handled only %v", got)
		}
	}
	assert.Equal(t, []string{"k-0", "k-1", "k-2"}, got, "the key runs in order at the next member")
}

// waitPending waits until group g of "orders" on raw has n deliveries
// pending.
func waitPending(t *testing.T, raw *inmemory.Backend, n int, msg string) {
	t.Helper()
	require.Eventually(t, func() bool {
		gs, err := raw.Groups(context.Background(), "orders")
		require.NoError(t, err)
		return len(gs) == 1 && gs[0].Pending == backend.Figure(n)
	}, 10*time.Second, 10*time.Millisecond, msg)
}
