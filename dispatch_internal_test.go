package bus

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
)

// The acks workers buffer in the dispatcher are taken by the acker in
// order, and refused once the acker has closed.
func TestDispatcherBuffersWorkerAcksUntilClosed(t *testing.T) {
	p := newDispatcher(4, nil, nil, newAcker(nil, 2, time.Millisecond))
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
