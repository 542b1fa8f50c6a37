package bus

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/observer"
)

// The acks a worker buffers are flushed by the acker in order, with the
// acks made outside a worker, and refused once the acker has closed.
func TestWorkerAcksAreFlushedUntilClosed(t *testing.T) {
	r := &ackRecorder{}
	c := newTestConsumer(r, consumerConfig{AckBatch: 8, MaxInFlight: 8})
	a := c.acks
	w := a.newBuf()
	require.NoError(t, w.add("a"))
	require.NoError(t, a.add("x"))
	require.NoError(t, w.add("b"))
	assert.EqualValues(t, 3, a.waiting.Load(), "the ids of both buffers are counted together")
	a.flush(context.Background())
	assert.Equal(t, [][]backend.AckID{{"x", "a", "b"}}, r.acked(), "one backend call for both buffers")
	assert.Zero(t, a.waiting.Load(), "a flush empties the buffers")
	require.NoError(t, w.add("c"))
	a.dropBuf(w)
	assert.EqualValues(t, 1, a.waiting.Load(), "a dropped buffer's acks move to the acker's own, still counted")
	w = a.newBuf()
	require.NoError(t, w.add("d"))
	a.closed.Store(true) // as acker.close does
	assert.ErrorIs(t, w.add("e"), ErrClosed, "refused after close")
	assert.ErrorIs(t, a.add("f"), ErrClosed, "refused after close")
	a.flush(context.Background())
	assert.Equal(t, []backend.AckID{"c", "d"}, r.acked()[1], "what was buffered before close is still flushed")
}

// Acks spread over several workers' buffers are flushed once size of
// them wait together, without waiting for the interval or for one
// buffer to fill: what waits unflushed is bounded by size, however many
// workers buffer acks.
func TestAckerFlushesWhenBuffersTogetherHoldABatch(t *testing.T) {
	r := &ackRecorder{called: make(chan struct{}, 1)}
	a := newAcker(r, observer.Nop(), "t", "g", 4, time.Hour)
	done := make(chan struct{})
	go func() { defer close(done); a.run() }()
	w1, w2 := a.newBuf(), a.newBuf()
	require.NoError(t, w1.add("a"))
	require.NoError(t, w2.add("b"))
	require.NoError(t, w1.add("c"))
	require.NoError(t, w2.add("d"))
	select {
	case <-r.called:
	case <-time.After(5 * time.Second):
		t.Fatal("no flush with four acks waiting in two buffers, with a batch of four and an hour's interval")
	}
	assert.ElementsMatch(t, []backend.AckID{"a", "b", "c", "d"}, r.acked()[0], "one call with the acks of both buffers")
	require.NoError(t, a.close(context.Background()))
	<-done
}

// A subscription flushes its acks once as many wait as it has in-flight
// slots, whatever its batch size and interval: a broker that pushes at
// most that many unacked messages (a prefetch, a max ack pending) sends
// nothing more until they are flushed.
func TestAcksFlushOnceAsManyWaitAsTheSubscriptionHasSlots(t *testing.T) {
	r := &ackRecorder{called: make(chan struct{}, 1)}
	c := newTestConsumer(r, consumerConfig{AckBatch: 256, MaxInFlight: 2})
	a := c.acks
	a.interval = time.Hour
	done := make(chan struct{})
	go func() { defer close(done); a.run() }()
	require.NoError(t, a.add("a"))
	require.NoError(t, a.add("b"))
	select {
	case <-r.called:
	case <-time.After(5 * time.Second):
		t.Fatal("no flush with two acks waiting on a subscription of two slots, with a batch of 256 and an hour's interval")
	}
	assert.Equal(t, []backend.AckID{"a", "b"}, r.acked()[0], "one call with both acks")
	require.NoError(t, a.close(context.Background()))
	<-done
}

// ackRecorder is a backend subscription that records its Ack calls.
type ackRecorder struct {
	mu     sync.Mutex
	calls  [][]backend.AckID
	called chan struct{} // when set, signalled after each call
}

func (r *ackRecorder) Receive(context.Context, int) ([]*backend.Message, error) { return nil, nil }
func (r *ackRecorder) Nack(context.Context, backend.AckID, time.Duration) error { return nil }
func (r *ackRecorder) Close() error                                             { return nil }

func (r *ackRecorder) Ack(_ context.Context, ids []backend.AckID) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, append([]backend.AckID(nil), ids...))
	if r.called != nil {
		signal(r.called)
	}
	return nil
}

func (r *ackRecorder) acked() [][]backend.AckID {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]backend.AckID(nil), r.calls...)
}

// newDispatchTest returns the dispatcher of a consumer of max in flight
// whose handler is h (AckOnReceive on an at-most-once backend: no lease,
// no retry), and a maker of deliveries that hold a slot each.
func newDispatchTest(t *testing.T, max int, h Handler) (*dispatcher, func() *record) {
	c := newTestConsumer(&ackRecorder{}, consumerConfig{MaxInFlight: max, AckMode: AckOnReceive, Handler: h})
	return c.disp, func() *record {
		d, ok := newTestRecord(c, &backend.Message{ID: "m", AckID: "m"})
		require.True(t, ok, "a free slot for the delivery")
		return d
	}
}

// The stall check gives every queued delivery a worker when the workers
// took fewer deliveries since the last check than are queued while a
// processor's worth of them is in handlers, and leaves the pool alone
// while they keep up, or while fewer are in handlers (the woken ones wait
// for a processor, not for a handler).
func TestStallCheckWakesWorkersOnlyWhenTheQueueIsNotDraining(t *testing.T) {
	release := make(chan struct{})
	var running atomic.Int32
	p, rec := newDispatchTest(t, 8, func(context.Context, *Delivery) error {
		running.Add(1)
		<-release
		return nil
	})
	p.stallAfter = time.Hour // the test calls checkStall itself
	p.procs = 2
	defer func() {
		close(release)
		p.stop()
	}()
	// check runs the stall check as if busy workers were in handlers
	// (the test stands in for them; the workers the check wakes count
	// themselves on top).
	check := func(taken uint64, busy int) (workers int, armed bool, mark uint64) {
		p.mu.Lock()
		p.taken = taken
		p.busy += busy
		p.mu.Unlock()
		p.checkStall()
		p.mu.Lock()
		defer p.mu.Unlock()
		p.busy -= busy
		return p.workers, p.armed, p.takenAtArm
	}

	p.mu.Lock()
	for range 5 {
		p.queue = append(p.queue, unsafe.Slice(rec(), 1))
		p.n++
	}
	p.takenAtArm = 7
	p.mu.Unlock()
	workers, armed, mark := check(12, 2) // 5 taken since the last check, 5 queued
	assert.Zero(t, workers, "workers that took as many as are queued are keeping up")
	assert.True(t, armed, "the check looks again while deliveries are queued")
	assert.Equal(t, uint64(12), mark, "the next check counts from here")

	workers, armed, _ = check(16, 1) // 4 taken since: fewer than the 5 queued
	assert.Zero(t, workers, "with one worker in a handler of two processors, the queue waits for a processor")
	assert.True(t, armed)

	workers, _, _ = check(20, 2) // 4 taken since, both processors' workers in handlers
	assert.Equal(t, 5, workers, "every queued delivery gets a worker")
	require.Eventually(t, func() bool { return running.Load() == 5 }, 5*time.Second, time.Millisecond, "the woken workers run the queued deliveries")
}

// Workers that run out of work end, but for a processor's worth that
// waits for the next.
func TestIdleWorkersBeyondAProcessorsWorthEnd(t *testing.T) {
	release := make(chan struct{})
	p, rec := newDispatchTest(t, 8, func(context.Context, *Delivery) error {
		<-release
		return nil
	})
	p.stallAfter = time.Hour
	p.procs = 2
	defer p.stop()
	p.mu.Lock()
	for range 5 {
		p.queue = append(p.queue, unsafe.Slice(rec(), 1))
		p.n++
	}
	p.wakeLocked(5)
	workers := p.workers
	p.mu.Unlock()
	require.Equal(t, 5, workers, "a worker per queued delivery")
	close(release)
	require.Eventually(t, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.workers == 2 && p.idle == 2
	}, 5*time.Second, time.Millisecond, "three of the five end once the queue is empty")
}

// One sampled handler that took long (its worker waited for a processor)
// does not make the average slow; handlers slow every time do, after
// three samples.
func TestHandlerDurationSamplesAreCapped(t *testing.T) {
	var slow atomic.Bool
	p, rec := newDispatchTest(t, 8, func(context.Context, *Delivery) error {
		if slow.Load() {
			time.Sleep(5 * time.Millisecond) // the handler's own work
		}
		return nil
	})
	w := &workerSlot{acks: p.acker.newBuf()}
	runSampled := func(slowSample bool) {
		for range sampleEvery - 1 {
			p.runOne(rec(), w)
		}
		slow.Store(slowSample)
		w.timed = true // as nextLocked marks every sampleEvery-th
		p.runOne(rec(), w)
		w.timed = false
		slow.Store(false)
	}
	runSampled(true)
	assert.Less(t, time.Duration(p.slowNanos.Load()), slowHandler, "one long sample is not a slow handler")
	runSampled(false)
	runSampled(false)
	assert.Less(t, time.Duration(p.slowNanos.Load()), slowHandler)
	for range 3 {
		runSampled(true)
	}
	assert.GreaterOrEqual(t, time.Duration(p.slowNanos.Load()), slowHandler, "three slow samples in a row are")
}

// Slow handlers are noticed while every queued delivery has a worker of
// its own (as the stall check gives them) that runs it and ends: their
// duration is sampled over the dispatcher's deliveries, not over each
// worker's, so a batch queued after them gets a worker per delivery at
// once instead of a processor's worth of them.
func TestSlowHandlersGiveEachDeliveryAWorkerWhenWorkersRunOneEach(t *testing.T) {
	const batch, rounds = 16, 8
	gate := make(chan struct{})
	var gated atomic.Bool
	var running atomic.Int32
	p, rec := newDispatchTest(t, batch, func(context.Context, *Delivery) error {
		running.Add(1)
		defer running.Add(-1)
		if gated.Load() {
			<-gate
			return nil
		}
		time.Sleep(time.Millisecond) // the handler's own work
		return nil
	})
	p.stallAfter = time.Hour // the test wakes the workers as the stall check does
	p.procs = 2
	defer func() {
		close(gate)
		p.stop()
	}()
	idle := func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.c.slots.InUse() == 0 && p.workers == p.procs && p.idle == p.procs
	}
	for range rounds {
		p.mu.Lock()
		for range batch {
			p.queue = append(p.queue, unsafe.Slice(rec(), 1))
			p.n++
		}
		p.wakeLocked(batch)
		p.mu.Unlock()
		require.Eventually(t, idle, 5*time.Second, time.Millisecond,
			"the round's deliveries run and all but a processor's worth of workers end")
	}
	gated.Store(true)
	ds := make([]*record, batch)
	for i := range ds {
		ds[i] = rec()
	}
	p.push(ds)
	require.Eventually(t, func() bool { return running.Load() == batch }, 5*time.Second, time.Millisecond,
		"after %d slow handlers, each of a batch of %d gets a worker at once", rounds*batch, batch)
}
