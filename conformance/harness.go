package conformance

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	bus "github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/observer"
)

// Base timings of the suite, multiplied by WithTimeScale.
const (
	baseAckTimeout = 500 * time.Millisecond // lease of the redelivery cases
	baseLongLease  = 20 * time.Second       // lease of cases that must not see a redelivery
	baseDeadline   = 10 * time.Second       // deadline of every positive wait
	pollInterval   = 5 * time.Millisecond
	closeTimeout   = 10 * time.Second
)

// suite is the state one case gets: how to make backends and what they
// can do.
type suite struct {
	newBackend NewBackend
	cfg        config
	caps       backend.Capabilities
}

// ackTimeout is the short lease used where a case waits for a redelivery.
func (s *suite) ackTimeout() time.Duration { return s.cfg.dur(baseAckTimeout) }

// longLease is a lease no case outlives, for cases that count exactly.
func (s *suite) longLease() time.Duration { return s.cfg.dur(baseLongLease) }

// quiet is the window in which an unexpected redelivery would show up:
// twice the short lease.
func (s *suite) quiet() time.Duration { return 2 * s.ackTimeout() }

// deadline bounds every positive wait.
func (s *suite) deadline() time.Duration { return s.cfg.dur(baseDeadline) }

// count returns full, or short under -short.
func count(full, short int) int {
	if testing.Short() {
		return short
	}
	return full
}

// eventually waits until cond holds, failing the test at the deadline.
func (s *suite) eventually(t testing.TB, cond func() bool, msgAndArgs ...any) {
	t.Helper()
	require.Eventually(t, cond, s.deadline(), pollInterval, msgAndArgs...)
}

// never asserts cond stays false for the whole window.
func (s *suite) never(t testing.TB, window time.Duration, cond func() bool, msgAndArgs ...any) {
	t.Helper()
	require.Never(t, cond, window, pollInterval, msgAndArgs...)
}

// recv waits for a value on ch until the deadline.
func recv[T any](t testing.TB, s *suite, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(s.deadline()):
		t.Fatalf("timed out after %v waiting for %s", s.deadline(), what)
		var zero T
		return zero
	}
}

// harness is one bus over a fresh, counted backend with a recording
// observer. The bus is closed when the test ends.
type harness struct {
	t      *testing.T
	s      *suite
	be     *countingBackend
	bus    *bus.Bus
	events *eventLog
}

func (s *suite) newHarness(t *testing.T, opts ...bus.Option) *harness {
	t.Helper()
	be := &countingBackend{Backend: s.newBackend(t)}
	events := &eventLog{}
	t.Cleanup(func() { events.logErrors(t) })
	b := bus.New(be, append([]bus.Option{bus.WithObserver(events)}, opts...)...)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.dur(closeTimeout))
		defer cancel()
		if err := b.Close(ctx); err != nil {
			t.Errorf("close the bus: %v", err)
		}
	})
	return &harness{t: t, s: s, be: be, bus: b, events: events}
}

// memberBus returns a bus over be, one member of a group beside the
// harness's bus, closed when the test ends. Its Close error is not
// checked: a member the case killed, or left with what it could not
// settle, reports it there.
func (s *suite) memberBus(t *testing.T, be backend.Backend) *bus.Bus {
	b := bus.New(be, bus.WithObserver(observer.Nop()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.dur(closeTimeout))
		defer cancel()
		_ = b.Close(ctx)
	})
	return b
}

// topic returns a topic no other case or run uses.
func (h *harness) topic(label string) string {
	return "conf." + label + "." + uniqueSuffix()
}

// group returns a consumer group no other case or run uses.
func (h *harness) group(label string) string {
	return "g-" + label + "-" + uniqueSuffix()
}

var nameSeq atomic.Uint64

func uniqueSuffix() string {
	return strconv.FormatInt(time.Now().UnixNano(), 36) +
		strconv.FormatUint(nameSeq.Add(1), 36) +
		strconv.FormatUint(rand.Uint64()&0xffffff, 36)
}

// subscribe subscribes h on topic and fails the test on error.
func (h *harness) subscribe(ctx context.Context, topic string, handler bus.Handler, opts ...bus.SubscribeOption) *bus.Subscription {
	h.t.Helper()
	sub, err := h.bus.Subscribe(ctx, topic, handler, opts...)
	require.NoError(h.t, err, "subscribe to %q", topic)
	return sub
}

// publish publishes msgs to topic and fails the test on error.
func (h *harness) publish(topic string, msgs ...*bus.Message) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), h.s.deadline())
	defer cancel()
	require.NoError(h.t, h.bus.Publish(ctx, topic, msgs...), "publish %d message(s) to %q", len(msgs), topic)
}

// publishN publishes n numbered messages (payload "<prefix>-<i>") in
// batches and returns them.
func (h *harness) publishN(topic, prefix string, n int) []*bus.Message {
	h.t.Helper()
	msgs := numbered(prefix, n)
	for start := 0; start < n; start += 64 {
		h.publish(topic, msgs[start:min(start+64, n)]...)
	}
	return msgs
}

// numbered returns n messages with payload "<prefix>-<i>".
func numbered(prefix string, n int) []*bus.Message {
	msgs := make([]*bus.Message, n)
	for i := range msgs {
		msgs[i] = &bus.Message{Payload: []byte(prefix + "-" + strconv.Itoa(i))}
	}
	return msgs
}

// closeSub closes sub within the close timeout and fails the test on error.
func (h *harness) closeSub(sub *bus.Subscription) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), h.s.cfg.dur(closeTimeout))
	defer cancel()
	require.NoError(h.t, sub.Close(ctx), "close a subscription")
}

// received is a copy of one delivery as the handler saw it.
type received struct {
	ID          string
	Key         string
	Headers     map[string]string
	Payload     []byte
	Topic       string
	Group       string
	Attempt     int
	PublishedAt time.Time
	At          time.Time
	Delivery    *bus.Delivery
}

// inbox records every delivery a handler sees. Safe for concurrent use.
type inbox struct {
	mu   sync.Mutex
	list []received
}

// handle records d and then runs next (nil: return nil).
func (in *inbox) handle(next bus.Handler) bus.Handler {
	return func(ctx context.Context, d *bus.Delivery) error {
		in.record(d)
		if next == nil {
			return nil
		}
		return next(ctx, d)
	}
}

func (in *inbox) record(d *bus.Delivery) {
	r := received{
		ID: d.ID, Key: d.Key, Headers: maps.Clone(d.Headers), Payload: bytes.Clone(d.Payload),
		Topic: d.Topic, Group: d.Group, Attempt: d.Attempt, PublishedAt: d.PublishedAt,
		At: time.Now(), Delivery: d,
	}
	in.mu.Lock()
	in.list = append(in.list, r)
	in.mu.Unlock()
}

func (in *inbox) all() []received {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]received(nil), in.list...)
}

func (in *inbox) len() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.list)
}

// byID counts deliveries per message ID.
func (in *inbox) byID() map[string]int {
	in.mu.Lock()
	defer in.mu.Unlock()
	m := make(map[string]int, len(in.list))
	for _, r := range in.list {
		m[r.ID]++
	}
	return m
}

// distinct is the number of distinct message IDs seen.
func (in *inbox) distinct() int { return len(in.byID()) }

// of returns the deliveries of one message, in arrival order.
func (in *inbox) of(id string) []received {
	in.mu.Lock()
	defer in.mu.Unlock()
	var out []received
	for _, r := range in.list {
		if r.ID == id {
			out = append(out, r)
		}
	}
	return out
}

// attempts returns the Attempt of each delivery of one message.
func (in *inbox) attempts(id string) []int {
	var out []int
	for _, r := range in.of(id) {
		out = append(out, r.Attempt)
	}
	return out
}

// requireExactlyOnce checks that every message in want was seen exactly
// once and nothing else was seen.
func requireExactlyOnce(t testing.TB, in *inbox, want []*bus.Message, who string) {
	t.Helper()
	got := in.byID()
	var missing, dup []string
	for _, m := range want {
		switch n := got[m.ID]; {
		case n == 0:
			missing = append(missing, m.ID)
		case n > 1:
			dup = append(dup, fmt.Sprintf("%s x%d", m.ID, n))
		}
		delete(got, m.ID)
	}
	require.Empty(t, missing, "%s: messages never delivered (%d of %d)", who, len(missing), len(want))
	require.Empty(t, dup, "%s: messages delivered more than once", who)
	require.Empty(t, got, "%s: deliveries of messages that were not published to this topic", who)
}

// countingBackend counts the calls that reach the backend, to prove that
// invalid input is rejected before any I/O. Subscribe returns the
// backend's own subscription so optional interfaces stay visible.
type countingBackend struct {
	backend.Backend
	publishes  atomic.Int64
	subscribes atomic.Int64
	// locks records the group lock's holders, and cuts one off (see
	// lockLink).
	locks lockLink
}

func (c *countingBackend) Publish(ctx context.Context, topic string, msgs []*backend.Message) error {
	c.publishes.Add(1)
	return c.Backend.Publish(ctx, topic, msgs)
}

func (c *countingBackend) Subscribe(ctx context.Context, topic string, cfg backend.SubscribeConfig) (backend.Subscription, error) {
	c.subscribes.Add(1)
	return c.Backend.Subscribe(ctx, topic, cfg)
}

// trySend sends v on ch without blocking: a handler must never block on
// the test (a redelivery the test did not expect would otherwise hang the
// subscription's Close). Channels are buffered for what a correct backend
// sends; extra values are dropped and the assertions catch the extras.
func trySend[T any](ch chan<- T, v T) {
	select {
	case ch <- v:
	default:
	}
}

// LockGroup forwards to the backend's group lock, when it has one.
func (c *countingBackend) LockGroup(ctx context.Context, topic, group, holder string, ttl time.Duration) (bool, bool, error) {
	l, ok := c.Backend.(backend.GroupLocker)
	if !ok {
		return false, false, fmt.Errorf("conformance: %w: no backend.GroupLocker", bus.ErrUnsupported)
	}
	if c.locks.isCut(holder) {
		return false, false, errLockLinkCut
	}
	held, takeover, err := l.LockGroup(ctx, topic, group, holder, ttl)
	if held {
		c.locks.held(holder)
	}
	return held, takeover, err
}

// UnlockGroup forwards to the backend's group lock, when it has one.
func (c *countingBackend) UnlockGroup(ctx context.Context, topic, group, holder string) error {
	l, ok := c.Backend.(backend.GroupLocker)
	if !ok {
		return fmt.Errorf("conformance: %w: no backend.GroupLocker", bus.ErrUnsupported)
	}
	return l.UnlockGroup(ctx, topic, group, holder)
}
