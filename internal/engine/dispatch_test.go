package engine

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
)

// The acks workers buffer in the dispatcher are taken by the acker in
// order, and refused once the acker has closed.
func TestDispatcherBuffersWorkerAcksUntilClosed(t *testing.T) {
	p := newDispatcher[struct{}](4, nil, nil, newAcker[struct{}](nil, 2, time.Millisecond))
	ack := func(id string) bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.ackLocked(id)
	}
	require.True(t, ack("a"))
	require.True(t, ack("b"))
	assert.Equal(t, 2, p.pendingAcks())
	assert.Equal(t, []backend.AckID{"a", "b"}, p.swapAcks(nil))
	assert.Zero(t, p.pendingAcks(), "taking empties the buffer")
	require.True(t, ack("c"))
	p.acker.closed.Store(true) // as acker.close does
	assert.False(t, ack("d"), "refused after close")
	assert.Equal(t, []backend.AckID{"c"}, p.swapAcks(nil), "what was buffered before close is still flushed")
}

// The stall check gives every queued delivery a worker when the workers
// took fewer deliveries since the last check than are queued while a
// processor's worth of them is in handlers, and leaves the pool alone
// while they keep up, or while fewer are in handlers (the woken ones wait
// for a processor, not for a handler).
func TestStallCheckWakesWorkersOnlyWhenTheQueueIsNotDraining(t *testing.T) {
	release := make(chan struct{})
	var running atomic.Int32
	p := newDispatcher(8, func(*Delivery[struct{}], *workerSlot[struct{}]) bool {
		running.Add(1)
		<-release
		return false
	}, func(int) {}, newAcker[struct{}](nil, 2, time.Millisecond))
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
		p.queue = append(p.queue, &Delivery[struct{}]{})
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

// One sampled handler that took long (its worker waited for a processor)
// does not make the average slow; handlers slow every time do, after
// three samples.
func TestHandlerDurationSamplesAreCapped(t *testing.T) {
	var slow atomic.Bool
	p := newDispatcher(8, func(*Delivery[struct{}], *workerSlot[struct{}]) bool {
		if slow.Load() {
			time.Sleep(5 * time.Millisecond) // the handler's own work
		}
		return false
	}, func(int) {}, newAcker[struct{}](nil, 2, time.Millisecond))
	w := &workerSlot[struct{}]{}
	d := &Delivery[struct{}]{}
	runSampled := func(slowSample bool) {
		for range 15 {
			p.runOne(d, w)
		}
		slow.Store(slowSample)
		p.runOne(d, w) // the 16th is timed
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
