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
// took fewer deliveries since the last check than are queued, and leaves
// the pool alone while they keep up.
func TestStallCheckWakesWorkersOnlyWhenTheQueueIsNotDraining(t *testing.T) {
	release := make(chan struct{})
	var running atomic.Int32
	p := newDispatcher(8, func(*Delivery[struct{}], *workerSlot[struct{}]) bool {
		running.Add(1)
		<-release
		return false
	}, func(int) {}, newAcker[struct{}](nil, 2, time.Millisecond))
	p.stallAfter = time.Hour // the test calls checkStall itself
	defer func() {
		close(release)
		p.stop()
	}()

	p.mu.Lock()
	for range 5 {
		p.queue = append(p.queue, &Delivery[struct{}]{})
	}
	p.taken, p.takenAtArm = 12, 7 // 5 taken since the last check, 5 queued
	p.mu.Unlock()
	p.checkStall()
	p.mu.Lock()
	workers, armed, mark := p.workers, p.armed, p.takenAtArm
	p.mu.Unlock()
	assert.Zero(t, workers, "workers that took as many as are queued are keeping up")
	assert.True(t, armed, "the check looks again while deliveries are queued")
	assert.Equal(t, uint64(12), mark, "the next check counts from here")

	p.mu.Lock()
	p.taken = 16 // 4 taken since: fewer than the 5 queued
	p.mu.Unlock()
	p.checkStall()
	p.mu.Lock()
	workers = p.workers
	p.mu.Unlock()
	assert.Equal(t, 5, workers, "every queued delivery gets a worker")
	require.Eventually(t, func() bool { return running.Load() == 5 }, 5*time.Second, time.Millisecond, "the woken workers run the queued deliveries")
}
