package bus_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
)

// partialBackend's subscription implements backend.PartialReceiver as a
// NATS pull does: a Receive with nothing coming asks for max messages
// (coming = max), and each Receive hands out at most one of them as they
// arrive (pushed by the test). A request ends when nothing arrives within
// a short wait (unless keepOpen), or when a Receive's ctx has ended, which
// returns what has arrived of it.
type partialBackend struct {
	*fakeBackend
	keepOpen bool
	running  atomic.Int32
	sub      chan *partialSub
}

func newPartialBackend(keepOpen bool) *partialBackend {
	return &partialBackend{fakeBackend: newFakeBackend(), keepOpen: keepOpen, sub: make(chan *partialSub, 1)}
}

func (p *partialBackend) Subscribe(ctx context.Context, topic string, cfg backend.SubscribeConfig) (backend.Subscription, error) {
	s, _ := p.fakeBackend.Subscribe(ctx, topic, cfg)
	ps := &partialSub{fakeSub: s.(*fakeSub), keepOpen: p.keepOpen, running: &p.running}
	p.sub <- ps
	return ps, nil
}

type partialSub struct {
	*fakeSub
	// keepOpen keeps a request open when nothing arrives in a while.
	keepOpen bool
	// running counts the handlers running, which the test's handler
	// keeps.
	running *atomic.Int32

	mu     sync.Mutex
	coming int
	// tooSmall counts Receives whose max was below what was coming;
	// overrun is the most handlers running plus messages coming seen
	// after a Receive; endedWithComing counts Receives whose ctx had ended while
	// messages were coming.
	tooSmall, overrun, endedWithComing int
}

func (s *partialSub) Coming() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.coming
}

func (s *partialSub) Receive(ctx context.Context, max int) ([]*bus.BackendMessage, error) {
	s.mu.Lock()
	if max < s.coming {
		s.tooSmall++
	}
	if s.coming == 0 {
		s.coming = max
	}
	coming := s.coming
	s.mu.Unlock()
	out, err := s.take(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.coming -= len(out)
	if ctx.Err() != nil && coming > 0 {
		s.endedWithComing++
	}
	if err != nil || (len(out) == 0 && (!s.keepOpen || ctx.Err() != nil)) {
		s.coming = 0 // the request ended
	}
	s.overrun = maxInt(s.overrun, int(s.running.Load())+s.coming)
	return out, err
}

// take returns the next arrived message, or all that arrived up to coming
// when ctx has ended.
func (s *partialSub) take(ctx context.Context) ([]*bus.BackendMessage, error) {
	f := s.f
	timeout := time.After(50 * time.Millisecond)
	for {
		s.mu.Lock()
		n := 1
		if ctx.Err() != nil {
			n = s.coming
		}
		s.mu.Unlock()
		f.mu.Lock()
		n = min(n, len(f.queue))
		if n > 0 {
			out := f.queue[:n:n]
			f.queue = f.queue[n:]
			f.outstand += n
			f.mu.Unlock()
			return out, nil
		}
		f.mu.Unlock()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		select {
		case <-ctx.Done():
		case <-f.wake:
		case <-timeout:
			return nil, nil
		}
	}
}

func (s *partialSub) counts() (tooSmall, overrun, endedWithComing, coming int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tooSmall, s.overrun, s.endedWithComing, s.coming
}

// handleAll waits until the total messages pushed to p are acked, then
// closes b.
func handleAll(t *testing.T, p *partialBackend, b *bus.Bus, total int) {
	t.Helper()
	require.Eventually(t, func() bool { acked, _, _ := p.snapshot(); return len(acked) == total }, waitFor, time.Millisecond,
		"every message is handled")
	require.NoError(t, b.Close(context.Background()))
}

// raiseTo raises most to n when n is more.
func raiseTo(most *atomic.Int64, n int64) {
	for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
	}
}

func TestPartialReceiveKeepsCapacityForMessagesComing(t *testing.T) {
	const limit, total = 4, 200
	p := newPartialBackend(false)
	b := bus.New(p, bus.WithAckBatch(4, time.Millisecond))
	_, err := b.Subscribe(context.Background(), "orders", func(context.Context, *bus.Delivery) error {
		p.running.Add(1)
		defer p.running.Add(-1)
		time.Sleep(100 * time.Microsecond) // the handler's work
		return nil
	}, bus.WithMaxInFlight(limit))
	require.NoError(t, err)
	s := within(t, p.sub, "subscription")
	for i := range total {
		p.push(msg(strconv.Itoa(i), 1))
	}
	handleAll(t, p, b, total)
	acked, _, _ := p.snapshot()
	seen := map[string]int{}
	for _, id := range acked {
		seen[id]++
	}
	assert.Len(t, seen, total, "each message is acked once")
	tooSmall, overrun, _, _ := s.counts()
	assert.Zero(t, tooSmall, "each Receive is asked for at least what is coming")
	assert.LessOrEqual(t, overrun, limit, "handlers running plus messages coming never exceed MaxInFlight")
}

// With messages arriving one at a time while slow handlers hold their
// slots, a Receive keeps returning messages its request asked for before:
// without the capacity kept for them, more handlers than MaxInFlight run.
func TestPartialReceiveNeverRunsMoreThanMaxInFlight(t *testing.T) {
	const limit, total = 4, 60
	p := newPartialBackend(true)
	var most atomic.Int64
	b := bus.New(p, bus.WithAckBatch(4, time.Millisecond))
	_, err := b.Subscribe(context.Background(), "orders", func(context.Context, *bus.Delivery) error {
		n := p.running.Add(1)
		defer p.running.Add(-1)
		raiseTo(&most, int64(n))
		time.Sleep(2 * time.Millisecond) // the handler's work, which holds its slot
		return nil
	}, bus.WithMaxInFlight(limit))
	require.NoError(t, err)
	s := within(t, p.sub, "subscription")
	for i := range total {
		p.push(msg(strconv.Itoa(i), 1))
		require.Eventually(t, func() bool { return p.queued() == 0 }, waitFor, 100*time.Microsecond, "message %d taken", i)
	}
	handleAll(t, p, b, total)
	tooSmall, overrun, _, _ := s.counts()
	assert.Zero(t, tooSmall, "each Receive is asked for at least what is coming")
	assert.LessOrEqual(t, int(most.Load()), limit, "never more handlers running than MaxInFlight")
	assert.LessOrEqual(t, overrun, limit, "handlers running plus messages coming never exceed MaxInFlight")
}

func TestCloseWithMessagesComingCollectsThem(t *testing.T) {
	p := newPartialBackend(true)
	b := bus.New(p, bus.WithAckBatch(1, time.Millisecond))
	handled := make(chan string, 8)
	_, err := b.Subscribe(context.Background(), "orders", func(_ context.Context, d *bus.Delivery) error {
		handled <- d.ID
		return nil
	}, bus.WithMaxInFlight(8))
	require.NoError(t, err)
	s := within(t, p.sub, "subscription")
	p.push(msg("first", 1))
	assert.Equal(t, "first", within(t, handled, "delivery"))
	require.Eventually(t, func() bool { _, _, _, coming := s.counts(); return coming > 0 }, waitFor, time.Millisecond,
		"a request with messages coming is open")
	require.NoError(t, b.Close(context.Background()))
	_, _, ended, coming := s.counts()
	assert.Positive(t, ended, "Close ends the open request with a Receive whose ctx has ended")
	assert.Zero(t, coming, "nothing is coming once the subscription stopped")
}

// queued is how many pushed messages no Receive has taken yet.
func (p *partialBackend) queued() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.queue)
}
