package conformance

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	bus "github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/testkit/crashtest"
)

// crashAckTimeout is the ack timeout of testCrashStallsOnlyItsKeys: long
// next to the bound within which the other keys resume, so that a member
// that waits one ack timeout after a takeover fails the case.
const crashAckTimeout = 20 * time.Second

// crashResumeBound is within how long after a key-ordered member died
// the group's other keys resume on a backend with backend.PendingLister:
// the group lock's ttl, the handover settle and the list, with room for
// a loaded machine (docs/ordering.md states the bound).
const crashResumeBound = 10 * time.Second

// handledAt is one delivery a surviving member handled.
type handledAt struct {
	id      string
	attempt int
	at      time.Time
}

// testCrashStallsOnlyItsKeys: member A of a key-ordered group dies while
// it handles a-0 (a-1 waiting behind it); member B, waiting for the group
// lock, takes over. B handles another key's messages, published after
// the crash, within crashResumeBound, far less than the ack timeout; key
// a resumes only when a-0's lease ends (with WithCrashReturnsAtLapse,
// when A's lock lapsed, within the same bound), a-0 first (redelivered),
// then a-1. A backend without backend.PendingLister waits 1.5 s and one
// ack timeout: the case is skipped there.
func testCrashStallsOnlyItsKeys(t *testing.T, s *suite) {
	h := s.newHarness(t)
	h.crashHandover(t)
	if !h.probe(func(sub backend.Subscription) bool { _, ok := sub.(backend.PendingLister); return ok }) {
		t.Skipf("%s subscriptions do not implement backend.PendingLister: a takeover waits 1.5 s and one ack timeout", s.caps.Name)
	}
	topic, group := h.topic("crashkeys"), h.group("crashkeys")
	ackTimeout := s.cfg.dur(crashAckTimeout)
	var mu sync.Mutex
	var got []handledAt
	started := make(chan string, 8)
	opts := []bus.SubscribeOption{bus.WithGroup(group), bus.WithKeyOrdering(), bus.WithAckTimeout(ackTimeout), bus.WithMaxInFlight(4)}
	members := [2]*crashtest.Member{crashtest.New(h.be), crashtest.New(h.be)}
	subscribe := func(i int) {
		b := s.memberBus(t, members[i])
		_, err := b.Subscribe(context.Background(), topic, func(ctx context.Context, d *bus.Delivery) error {
			if i == 0 {
				trySend(started, d.ID)
				<-ctx.Done() // A holds what it is handling until it dies
				return ctx.Err()
			}
			mu.Lock()
			got = append(got, handledAt{d.ID, d.Attempt, time.Now()})
			mu.Unlock()
			return nil
		}, opts...)
		require.NoError(t, err)
	}
	subscribe(0)
	h.publish(topic, &bus.Message{ID: "a-0", Key: "a"}, &bus.Message{ID: "a-1", Key: "a"})
	require.Equal(t, "a-0", recv(t, s, started, "member A handles a-0"))
	subscribe(1) // B waits for the group lock
	members[0].Crash()
	crashed := time.Now()
	// What A's last fetch is handed is A's: the other keys are published
	// once it is over, as to a process that is gone.
	s.eventually(t, func() bool { return !members[0].Fetching() }, "member A's last fetch ends")
	h.publish(topic, &bus.Message{ID: "b-0", Key: "b"}, &bus.Message{ID: "b-1", Key: "b"}, &bus.Message{ID: "c-0", Key: "c"})

	snapshot := func() []handledAt {
		mu.Lock()
		defer mu.Unlock()
		return append([]handledAt(nil), got...)
	}
	find := func(hs []handledAt, id string) (handledAt, bool) {
		for _, x := range hs {
			if x.id == id {
				return x, true
			}
		}
		return handledAt{}, false
	}
	require.Eventually(t, func() bool {
		hs := snapshot()
		_, b1 := find(hs, "b-1")
		_, c0 := find(hs, "c-0")
		return b1 && c0
	}, crashResumeBound+s.deadline(), pollInterval, "member B handles the other keys")
	hs := snapshot()
	b1, _ := find(hs, "b-1")
	c0, _ := find(hs, "c-0")
	last := b1.at
	if c0.at.After(last) {
		last = c0.at
	}
	took := last.Sub(crashed)
	require.Less(t, took, s.cfg.dur(crashResumeBound),
		"the other keys resumed %v after the crash, with a %v ack timeout: the bound is %v", took, ackTimeout, s.cfg.dur(crashResumeBound))
	t.Logf("other keys resumed %v after the crash (ack timeout %v)", took.Round(time.Millisecond), ackTimeout)
	if s.cfg.crashReturnsAtLapse {
		// The dead member's deliveries came back when its lock lapsed:
		// key a resumes with the others, in order.
		require.Eventually(t, func() bool {
			_, ok := find(snapshot(), "a-1")
			return ok
		}, crashResumeBound+s.deadline(), pollInterval, "key a resumes after the dead member's lock lapsed")
		a1, _ := find(snapshot(), "a-1")
		require.Less(t, a1.at.Sub(crashed), s.cfg.dur(crashResumeBound), "key a resumed after the bound")
	} else {
		_, a0 := find(hs, "a-0")
		_, a1 := find(hs, "a-1")
		require.False(t, a0 || a1, "key a ran before a-0's lease ended: %v", hs)
		if testing.Short() {
			return
		}
		require.Eventually(t, func() bool {
			_, ok := find(snapshot(), "a-1")
			return ok
		}, ackTimeout+s.deadline(), pollInterval, "key a resumes after a-0's lease")
	}
	hs = snapshot()
	var order []string
	for _, x := range hs {
		if x.id == "a-0" || x.id == "a-1" {
			order = append(order, x.id)
		}
	}
	require.Equal(t, []string{"a-0", "a-1"}, order[:2], "key a in order after the crash: %v", hs)
	a, _ := find(hs, "a-0")
	require.Equal(t, 2, a.attempt, "a-0 is the dead member's delivery, redelivered")
	t.Logf("key a resumed %v after the crash, %s", a.at.Sub(crashed).Round(time.Millisecond), fmt.Sprint(order))
}

// testKeyOrderCloseWhileAKeyWaits: member A of a key-ordered group dies
// while it handles a-0 (a-1 waiting behind it); member B takes the group
// lock over and holds key a back until A's deliveries come back. B
// closes while key a still waits: it lets the lock lapse rather than
// release it, so member C, which asks for the lock only afterwards, takes
// it over as after a crash and holds key a back too. C handles a-0, then
// a-1, then a-2, published after B closed, never a-2 first. A backend
// without backend.PendingLister, or whose dead member's deliveries come
// back when its lock lapses (WithCrashReturnsAtLapse), never has B close
// with key a waiting: the case is skipped there.
func testKeyOrderCloseWhileAKeyWaits(t *testing.T, s *suite) {
	h := s.newHarness(t)
	h.crashHandover(t)
	if !h.probe(func(sub backend.Subscription) bool { _, ok := sub.(backend.PendingLister); return ok }) {
		t.Skipf("%s subscriptions do not implement backend.PendingLister: a takeover waits one ack timeout", s.caps.Name)
	}
	if s.cfg.crashReturnsAtLapse {
		t.Skipf("on %s a dead member's deliveries come back when its lock lapses: no key waits when the next member closes", s.caps.Name)
	}
	topic, group := h.topic("closewait"), h.group("closewait")
	ackTimeout := s.cfg.dur(crashAckTimeout)
	opts := []bus.SubscribeOption{bus.WithGroup(group), bus.WithKeyOrdering(), bus.WithAckTimeout(ackTimeout), bus.WithMaxInFlight(4)}
	member := func(be backend.Backend, handler bus.Handler) *bus.Bus {
		b := s.memberBus(t, be)
		_, err := b.Subscribe(context.Background(), topic, handler, opts...)
		require.NoError(t, err)
		return b
	}
	started := make(chan string, 8)
	dead := crashtest.New(h.be)
	member(dead, func(ctx context.Context, d *bus.Delivery) error {
		trySend(started, d.ID)
		<-ctx.Done() // A holds what it is handling until it dies
		return ctx.Err()
	})
	h.publish(topic, &bus.Message{ID: "a-0", Key: "a"}, &bus.Message{ID: "a-1", Key: "a"})
	require.Equal(t, "a-0", recv(t, s, started, "member A handles a-0"))
	handledByB := make(chan string, 8)
	second := member(crashtest.New(h.be), func(_ context.Context, d *bus.Delivery) error {
		trySend(handledByB, d.ID)
		return nil
	})
	dead.Crash()
	s.eventually(t, func() bool { return !dead.Fetching() }, "member A's last fetch ends")
	h.publish(topic, &bus.Message{ID: "b-0", Key: "b"})
	require.Equal(t, "b-0", recv(t, s, handledByB, "member B takes the lock over and handles key b"))
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.dur(closeTimeout))
	defer cancel()
	_ = second.Close(ctx) // it could not settle key a: it reports so
	select {
	case id := <-handledByB:
		t.Fatalf("member B handled %s while a-0 was out on the dead member's lease", id)
	default:
	}

	var mu sync.Mutex
	var got []handledAt
	member(crashtest.New(h.be), func(_ context.Context, d *bus.Delivery) error {
		mu.Lock()
		got = append(got, handledAt{d.ID, d.Attempt, time.Now()})
		mu.Unlock()
		return nil
	})
	h.publish(topic, &bus.Message{ID: "a-2", Key: "a"})
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) >= 3
	}, ackTimeout+s.deadline(), pollInterval, "member C handles key a")
	mu.Lock()
	defer mu.Unlock()
	var order []string
	for _, x := range got {
		order = append(order, x.id)
	}
	require.Equal(t, []string{"a-0", "a-1", "a-2"}, order, "key a in order across B's close")
	require.Equal(t, 2, got[0].attempt, "a-0 is the dead member's delivery, redelivered")
}

// notBackLease is the ack timeout of testKeyOrderHeadNotGivenBack: long
// next to the moments a member that took a released lock needs to run a
// later message of the key, so that such a member fails the case.
const notBackLease = 6 * time.Second

// testKeyOrderHeadNotGivenBack: a key-ordered member closes while it runs
// k-0, k-1 and k-2 fetched behind it, and cannot give k-0 back (its
// Release and Nack fail, as over a link that drops): k-0 stays pending on
// its lease. The member lets the group lock lapse rather than release it,
// and leaves k-1 and k-2 to their leases too rather than give them back
// ahead of k-0, so the next member takes the lock over as after a crash
// and handles k-0, k-1, k-2 and k-3, published after the close, in order.
func testKeyOrderHeadNotGivenBack(t *testing.T, s *suite) {
	h := s.newHarness(t)
	h.crashHandover(t)
	in, ok := h.be.Backend.(backend.Inspector)
	if !ok {
		t.Skipf("%s does not implement backend.Inspector: the case waits until the member fetched the key", s.caps.Name)
	}
	topic, group := h.topic("notback"), h.group("notback")
	opts := []bus.SubscribeOption{bus.WithGroup(group), bus.WithKeyOrdering(), bus.WithAckTimeout(s.cfg.dur(notBackLease)), bus.WithMaxInFlight(4)}
	first := crashtest.New(h.be)
	first.KeepOnLease("k-0")
	b := s.memberBus(t, first)
	running := make(chan string, 8)
	sub, err := b.Subscribe(context.Background(), topic, func(ctx context.Context, d *bus.Delivery) error {
		trySend(running, d.ID)
		<-ctx.Done() // k-0 runs until the close gives up on it
		return ctx.Err()
	}, opts...)
	require.NoError(t, err)
	h.publish(topic, &bus.Message{ID: "k-0", Key: "k"}, &bus.Message{ID: "k-1", Key: "k"}, &bus.Message{ID: "k-2", Key: "k"})
	require.Equal(t, "k-0", recv(t, s, running, "the first member runs k-0"))
	s.eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), s.deadline())
		defer cancel()
		gs, err := in.Groups(ctx, topic)
		return err == nil && len(gs) == 1 && gs[0].Pending == 3
	}, "k-1 and k-2 wait behind k-0 at the first member")
	short, cancel := context.WithTimeout(context.Background(), s.cfg.dur(200*time.Millisecond))
	defer cancel()
	_ = sub.Close(short) // the handler is cancelled; k-0 cannot be given back
	h.publish(topic, &bus.Message{ID: "k-3", Key: "k"})

	handled := make(chan string, 8)
	h.subscribe(context.Background(), topic, func(_ context.Context, d *bus.Delivery) error {
		trySend(handled, d.ID)
		return nil
	}, opts...)
	var got []string
	for len(got) < 4 {
		got = append(got, recv(t, s, handled, "the next member handles key k"))
	}
	require.Equal(t, []string{"k-0", "k-1", "k-2", "k-3"}, got, "the key runs in order at the next member")
	select {
	case id := <-running:
		t.Fatalf("the closed member ran %s", id)
	default:
	}
}
