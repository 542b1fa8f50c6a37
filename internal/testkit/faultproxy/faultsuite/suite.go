package faultsuite

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	bus "github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/testkit/faultproxy"
	"github.com/eventbus-go/bus/observer"
)

// Timings of the suite.
const (
	// Grace is what a call may take past its ctx deadline: the
	// scheduling of its goroutines on a loaded two-core machine under
	// the race detector, never a round trip of its own.
	Grace = 250 * time.Millisecond
	// ackTimeout is the lease of every subscription of the suite.
	ackTimeout = 500 * time.Millisecond
	// callTimeout is the ctx of a Publish outside the bound checks.
	callTimeout = 2 * time.Second
	// recoverWithin bounds the wait for recovery after a fault heals.
	recoverWithin = 30 * time.Second
	// closeTimeout is the ctx of the buses' Close at the end of a case.
	closeTimeout = 5 * time.Second
	// caseLimit is the watchdog of one case.
	caseLimit = 2 * time.Minute
	poll      = 5 * time.Millisecond
)

// Harness describes the backend under test.
type Harness struct {
	// Target is the host:port of the private server the proxies forward
	// to. The suite never stops or restarts it.
	Target string
	// Open returns a backend whose every connection goes to addr (a
	// proxy's host:port), built the way an application builds it (URL and
	// options). The suite wraps it in a bus and closes that bus.
	Open func(t testing.TB, addr string) backend.Backend
	// StopServer and StartServer, if set, stop the private server and
	// start it again on the same address with the data it had (which
	// therefore must be persistent). Without them the restart case is
	// skipped.
	StopServer, StartServer func()
	// PauseServer and ResumeServer, if set, freeze the private server
	// (SIGSTOP) and let it run again (SIGCONT); RunPause and
	// RunPauseBounds need them.
	PauseServer, ResumeServer func()
	// PauseCases, if set, names the RunPause cases to run (OneMember,
	// TwoMembers, FourPartitions); all of them when empty.
	PauseCases []string
	// PauseMessages, if set, is the number of messages each RunPause
	// case publishes (3,000 when zero), for a server that cannot drain
	// 3,000 within the cases' 10 s.
	PauseMessages int
	// Skip names Run's cases that the backend documents as different,
	// with the reason (the subtest is skipped with it).
	Skip map[string]string
}

// Run runs every case as a subtest of t.
func Run(t *testing.T, h Harness) {
	require.NotEmpty(t, h.Target, "Harness.Target")
	require.NotNil(t, h.Open, "Harness.Open")
	cases := []struct {
		name string
		run  func(*env)
	}{
		{"ResetPublisherSide", testResetPublisherSide},
		{"ResetConsumerSide", testResetConsumerSide},
		{"BlackholeLongerThanAckTimeout", testBlackholeLongerThanAckTimeout},
		{"BlackholeBoundsEveryCall", testBlackholeBoundsEveryCall},
		{"Latency50ms", testLatency},
		{"Partition1500msDuringBatch", testPartitionDuringBatch},
		{"CloseMidRunFlushesFinished", testCloseMidRunFlushesFinished},
		{"ServerRestartMidRun", testServerRestartMidRun},
		{"PingBoundedOnDeadNetwork", testPingBoundedOnDeadNetwork},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if reason, ok := h.Skip[c.name]; ok {
				t.Skip(reason)
			}
			watchdog(t, caseLimit)
			e := &env{t: t, h: h, ledger: NewLedger(), topic: "fault." + strings.ToLower(c.name)}
			e.createGroup()
			c.run(e)
		})
	}
}

// watchdog fails the test binary with every goroutine's stack when t has
// not finished, cleanups included, within limit.
func watchdog(t *testing.T, limit time.Duration) {
	name := t.Name()
	timer := time.AfterFunc(limit, func() {
		buf := make([]byte, 4<<20)
		buf = buf[:runtime.Stack(buf, true)]
		fmt.Fprintf(os.Stderr, "faultsuite: %s still running after %v; goroutines:\n%s\n", name, limit, buf)
		panic(fmt.Sprintf("faultsuite: %s hung (watchdog %v)", name, limit))
	})
	t.Cleanup(func() { timer.Stop() }) // registered first: runs after every other cleanup
}

// env is what one case works with.
type env struct {
	t      *testing.T
	h      Harness
	ledger *Ledger
	topic  string
	calls  calls
	events events
}

// proxy starts a proxy to the target, closed after the buses of the case.
func (e *env) proxy() *faultproxy.Proxy {
	e.t.Helper()
	p, err := faultproxy.New(e.h.Target)
	require.NoError(e.t, err, "start a fault proxy")
	e.t.Cleanup(func() { assert.NoError(e.t, p.Close(), "close the fault proxy") })
	return p
}

// bus opens a backend through p and returns a bus over it, closed when
// the case ends.
func (e *env) bus(p *faultproxy.Proxy) *bus.Bus {
	e.t.Helper()
	return e.busAt(p.Addr())
}

// busAt opens a backend on addr and returns a bus over it, closed when
// the case ends.
func (e *env) busAt(addr string) *bus.Bus {
	e.t.Helper()
	b := bus.New(e.h.Open(e.t, addr), bus.WithObserver(&e.events))
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()
		_ = b.Close(ctx) // the bound checks assert on Close; here it only releases
	})
	return b
}

// createGroup creates the case's group "workers" before the case
// publishes, on a backend whose groups start with the messages published
// after they were created (no StartOldest): a member joins it and leaves.
// Elsewhere the members start from the oldest message. The member has the
// case's ack timeout, so that a message its last receive got after it
// left (on SQS, a long poll that Close cancelled) comes back within it.
func (e *env) createGroup() {
	e.t.Helper()
	b := bus.New(e.h.Open(e.t, e.h.Target))
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()
		_ = b.Close(ctx)
	}()
	if b.Capabilities().StartOldest {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	sub, err := b.Subscribe(ctx, e.topic, func(context.Context, *bus.Delivery) error { return nil },
		bus.WithGroup("workers"), bus.WithStartFrom(backend.StartNewest), bus.WithAckTimeout(ackTimeout))
	require.NoError(e.t, err, "create the group before the case publishes")
	require.NoError(e.t, sub.Close(ctx), "leave the group")
}

// startFrom starts a new group from the oldest message where the backend
// can (a member that subscribes after a publish still gets it), and from
// the newest elsewhere: the cases subscribe before they publish.
func startFrom(b *bus.Bus) bus.SubscribeOption {
	if b.Capabilities().StartOldest {
		return bus.WithStartFrom(backend.StartOldest)
	}
	return bus.WithStartFrom(backend.StartNewest)
}

// consume subscribes consumer to the case's topic in group "workers",
// recording every delivery in the ledger.
func (e *env) consume(b *bus.Bus, consumer string, opts ...bus.SubscribeOption) *bus.Subscription {
	e.t.Helper()
	return e.consumeWith(b, consumer, func(context.Context, *bus.Delivery) error { return nil }, opts...)
}

// consumeWith is consume with work done by the handler after the
// delivery is recorded.
func (e *env) consumeWith(b *bus.Bus, consumer string, work bus.Handler, opts ...bus.SubscribeOption) *bus.Subscription {
	e.t.Helper()
	base := []bus.SubscribeOption{
		bus.WithGroup("workers"), bus.WithAckTimeout(ackTimeout), startFrom(b),
	}
	sub, err := b.Subscribe(context.Background(), e.topic, func(ctx context.Context, d *bus.Delivery) error {
		e.ledger.Deliver(consumer, d.ID, d.Attempt)
		return work(ctx, d)
	}, append(base, opts...)...)
	require.NoError(e.t, err, "subscribe %s", consumer)
	return sub
}

// ids returns the IDs prefix-from ... prefix-(to-1).
func ids(prefix string, from, to int) []string {
	out := make([]string, 0, to-from)
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("%s-%d", prefix, i))
	}
	return out
}

func messages(ids []string) []*bus.Message {
	msgs := make([]*bus.Message, len(ids))
	for i, id := range ids {
		msgs[i] = &bus.Message{ID: id, Payload: []byte("payload of " + id)}
	}
	return msgs
}

// publish publishes ids in one call with a ctx of timeout, records the
// outcome in the ledger and the duration in the calls, and returns the
// error.
func (e *env) publish(b *bus.Bus, ids []string, timeout time.Duration) error {
	err := e.calls.timed("Publish", timeout, func(ctx context.Context) error {
		return b.Publish(ctx, e.topic, messages(ids)...)
	})
	e.ledger.Publish(ids, err)
	return err
}

// publishAll publishes n messages with IDs prefix-0 ... in batches, each
// call with a ctx of timeout. A failed batch is published again (same
// IDs, as an application retries) until it succeeds; the case fails if
// publishing does not recover within recoverWithin. progress, if not nil,
// is called with the number of messages published so far after each
// successful batch.
func (e *env) publishAll(b *bus.Bus, prefix string, n, batch int, timeout time.Duration, progress func(int)) {
	e.t.Helper()
	for start := 0; start < n; start += batch {
		batchIDs := ids(prefix, start, min(start+batch, n))
		var failingSince time.Time
		for e.publish(b, batchIDs, timeout) != nil {
			if failingSince.IsZero() {
				failingSince = time.Now()
			}
			require.Less(e.t, time.Since(failingSince), recoverWithin,
				"publishing of %s did not recover within %v", batchIDs[0], recoverWithin)
			time.Sleep(20 * time.Millisecond) // pacing of the application's retry, not synchronisation
		}
		if progress != nil {
			progress(start + len(batchIDs))
		}
	}
}

// waitNoLoss waits until every published ID was delivered.
func (e *env) waitNoLoss(what string) {
	e.t.Helper()
	require.Eventually(e.t, func() bool { return e.ledger.Summary().Lost == 0 }, recoverWithin, poll,
		"%s: every message whose Publish returned nil is delivered; still missing (first 20): %v", what, e.ledger.Lost())
}

// finish logs the ledger and the calls and asserts the case's invariants:
// nothing lost, every timed call within its ctx, every subscription alive.
func (e *env) finish(subs ...*bus.Subscription) Summary {
	e.t.Helper()
	s := e.ledger.Log(e.t, e.t.Name())
	e.calls.log(e.t)
	e.t.Logf("observer events: %s", e.events.String())
	assert.Zero(e.t, s.Lost, "lost: messages whose Publish returned nil and no handler received")
	e.calls.assertWithinCtx(e.t)
	for i, sub := range subs {
		select {
		case <-sub.Done():
			e.t.Errorf("subscription %d ended by itself (err %v); it must recover without a restart", i, sub.Err())
		default:
		}
	}
	return s
}

// calls records how long timed calls took against their ctx.
type calls struct {
	mu    sync.Mutex
	stats map[string]*callStats
}

type callStats struct {
	n, errs, over int
	worst         time.Duration // largest time past the ctx deadline
	worstCtx      time.Duration
}

// timed runs f with a ctx of timeout and records whether it returned
// within timeout plus Grace.
func (c *calls) timed(op string, timeout time.Duration, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	err := f(ctx)
	c.record(op, timeout, time.Since(start), err)
	return err
}

func (c *calls) record(op string, timeout, took time.Duration, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stats == nil {
		c.stats = map[string]*callStats{}
	}
	s := c.stats[op]
	if s == nil {
		s = &callStats{}
		c.stats[op] = s
	}
	s.n++
	if err != nil {
		s.errs++
	}
	if past := took - timeout; past > Grace {
		s.over++
		if past > s.worst {
			s.worst, s.worstCtx = past, timeout
		}
	}
}

func (c *calls) log(t testing.TB) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for op, s := range c.stats {
		t.Logf("calls %s: n=%d errors=%d past_ctx=%d", op, s.n, s.errs, s.over)
	}
}

func (c *calls) assertWithinCtx(t testing.TB) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for op, s := range c.stats {
		assert.Zero(t, s.over, "%s: %d of %d calls returned more than %v past their ctx deadline (worst: %v past a %v ctx)",
			op, s.over, s.n, Grace, s.worst, s.worstCtx)
	}
}

// events counts observer events by scope.
type events struct {
	mu    sync.Mutex
	n     map[observer.Scope]int
	first []string // the first eventsKept events, as logFirst prints them
}

// eventsKept is how many events an events keeps to log.
const eventsKept = 40

func (e *events) Observe(_ context.Context, ev observer.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.n == nil {
		e.n = map[observer.Scope]int{}
	}
	e.n[ev.Scope]++
	if len(e.first) < eventsKept {
		e.first = append(e.first, fmt.Sprintf("%s %v topic %q group %q message %q: %v",
			time.Now().Format("15:04:05.000"), ev.Scope, ev.Topic, ev.Group, ev.MessageID, ev.Err))
	}
}

// logFirst logs the events kept, when t failed.
func (e *events) logFirst(t *testing.T) {
	if !t.Failed() {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range e.first {
		t.Log("event " + s)
	}
}

func (e *events) String() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var b strings.Builder
	for s, n := range e.n {
		fmt.Fprintf(&b, "%v=%d ", s, n)
	}
	return strings.TrimSpace(b.String())
}
