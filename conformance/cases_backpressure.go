package conformance

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	bus "github.com/eventbus-go/bus"
)

// gauge records how many handlers run at once and the most it saw.
// Handlers wait (boundedly) until the limit is reached, so a correct bus
// is driven to exactly its limit and a broken one past it.
type gauge struct {
	limit   int64
	cur     atomic.Int64
	max     atomic.Int64
	reached chan struct{}
	once    sync.Once
}

func newGauge(limit int) *gauge {
	return &gauge{limit: int64(limit), reached: make(chan struct{})}
}

// run records one handler for the duration of the call: it waits until the
// limit was reached once (or hold passed), then works for a moment.
func (g *gauge) run(hold time.Duration) {
	n := g.cur.Add(1)
	defer g.cur.Add(-1)
	for {
		m := g.max.Load()
		if n <= m || g.max.CompareAndSwap(m, n) {
			break
		}
	}
	if n >= g.limit {
		g.once.Do(func() { close(g.reached) })
	}
	select {
	case <-g.reached:
	case <-time.After(hold):
	}
	time.Sleep(2 * time.Millisecond) // a little work, so handlers overlap
}

// testMaxInFlight: concurrency never exceeds WithMaxInFlight and reaches it.
func testMaxInFlight(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic := h.topic("inflight")
	const limit = 4
	g := newGauge(limit)
	in := &inbox{}
	h.subscribe(context.Background(), topic, in.handle(func(context.Context, *bus.Delivery) error {
		g.run(s.cfg.dur(time.Second))
		return nil
	}), bus.WithGroup(h.group("inflight")), bus.WithMaxInFlight(limit), bus.WithAckTimeout(s.longLease()))

	n := count(60, 24)
	h.publishN(topic, "m", n)
	s.eventually(t, func() bool { return in.distinct() >= n }, "all %d messages handled", n)
	assert.LessOrEqual(t, g.max.Load(), int64(limit), "in-flight handlers must never exceed WithMaxInFlight(%d)", limit)
	assert.Equal(t, int64(limit), g.max.Load(), "with a backlog the subscription should use all %d slots", limit)
}

// testRateLimiter: a rate limiter caps how many handlers start within a
// window and spaces the whole backlog at its rate. The lease is the short
// one: a redelivery starts after the window and only lengthens the span,
// and a broker that hides what a receive whose answer was lost handed out
// (an SQS standard queue) shows it again within the deadline.
func testRateLimiter(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic := h.topic("rate")
	const perSecond, burst = 50, 1
	in := &inbox{}
	h.subscribe(context.Background(), topic, in.handle(nil),
		bus.WithGroup(h.group("rate")), bus.WithLimiter(bus.NewRateLimiter(rate.Limit(perSecond), burst)),
		bus.WithAckTimeout(s.ackTimeout()))

	n := count(40, 25)
	published := time.Now() // no token is spent before this
	h.publishN(topic, "m", n)
	s.eventually(t, func() bool { return in.distinct() >= n }, "all %d messages handled", n)
	var starts []time.Time
	for _, r := range in.all() {
		starts = append(starts, r.At)
	}
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })

	// Every handler start spent a token; by published+window the limiter
	// can have granted at most burst + rate*window of them.
	const window = 300 * time.Millisecond
	maxInWindow := burst + int(perSecond*window.Seconds()) + 1
	inWindow := 0
	for _, at := range starts {
		if at.Sub(published) <= window {
			inWindow++
		}
	}
	assert.LessOrEqual(t, inWindow, maxInWindow, "handler starts within %v of the publish at %d/s, burst %d", window, perSecond, burst)
	minSpan := time.Duration(float64(n-burst) / perSecond * 0.9 * float64(time.Second))
	span := starts[len(starts)-1].Sub(published)
	assert.GreaterOrEqual(t, span, minSpan, "%d messages at %d/s (burst %d) take at least %v", n, perSecond, burst, minSpan)
}

// testSharedConcurrencyLimiter: one ConcurrencyLimiter shared by two
// subscriptions caps their total.
func testSharedConcurrencyLimiter(t *testing.T, s *suite) {
	h := s.newHarness(t)
	const limit = 3
	lim := bus.NewConcurrencyLimiter(limit)
	g := newGauge(limit)
	topics := []string{h.topic("shared-a"), h.topic("shared-b")}
	inboxes := []*inbox{{}, {}}
	subs := make([]*bus.Subscription, len(topics))
	for i, topic := range topics {
		subs[i] = h.subscribe(context.Background(), topic, inboxes[i].handle(func(context.Context, *bus.Delivery) error {
			g.run(s.cfg.dur(time.Second))
			return nil
		}), bus.WithGroup(h.group("shared")), bus.WithMaxInFlight(8), bus.WithLimiter(lim), bus.WithAckTimeout(s.longLease()))
	}

	n := count(20, 10)
	for _, topic := range topics {
		h.publishN(topic, "m", n)
	}
	s.eventually(t, func() bool { return inboxes[0].distinct() >= n && inboxes[1].distinct() >= n },
		"both subscriptions handle their %d messages", n)
	assert.LessOrEqual(t, g.max.Load(), int64(limit), "the shared limiter must cap both subscriptions together at %d", limit)
	assert.Equal(t, int64(limit), g.max.Load(), "with a backlog the subscriptions should use the whole shared limit")
	for _, sub := range subs {
		h.closeSub(sub)
	}
	inUse, ok := lim.(interface{ InUse() int })
	require.True(t, ok, "the concurrency limiter reports the units held")
	assert.Zero(t, inUse.InUse(), "closed subscriptions give back every unit of the shared limiter")
}
