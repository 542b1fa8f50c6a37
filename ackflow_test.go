package bus_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/observer"
)

// The ack a worker makes when a handler returns is flushed on the acker's
// own schedule: it does not wait for the worker's next handler, however
// long that one runs.
func TestAckAfterHandlerIsFlushedWhileTheWorkersNextHandlerRuns(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	running := make(chan struct{})
	// One slot: a single worker runs "a" and then "b".
	f, _, _, _ := startFake(t, func(_ context.Context, d *bus.Delivery) error {
		if d.ID == "b" {
			close(running)
			<-release
		}
		return nil
	}, bus.WithMaxInFlight(1))
	f.push(msg("a", 1), msg("b", 1))
	recv(t, running)
	require.Eventually(t, func() bool {
		acked, _, _ := f.snapshot()
		return slices.Contains(acked, "a")
	}, waitFor, time.Millisecond, "the ack of a reaches the backend while b's handler runs")
	acked, _, _ := f.snapshot()
	assert.NotContains(t, acked, "b", "b is not acked before its handler returns")
}

// A handler that ignores its cancelled ctx and returns after Close gave
// up on it: its ack is refused, counted and never sent, and the backend
// redelivers the message after its lease.
func TestAckOfHandlerReturningAfterCloseIsReportedNotSent(t *testing.T) {
	f := newFakeBackend()
	ev := &events{}
	b := bus.New(f, bus.WithObserver(ev), bus.WithAckBatch(4, time.Millisecond))
	release := make(chan struct{})
	running := make(chan struct{})
	returned := make(chan struct{})
	outcome := make(chan bus.Outcome, 1)
	s, err := b.Subscribe(context.Background(), "orders", func(_ context.Context, d *bus.Delivery) error {
		defer close(returned)
		d.OnSettle(func(o bus.Outcome, _ error) { outcome <- o })
		close(running)
		<-release // ignores ctx
		return nil
	})
	require.NoError(t, err)
	f.push(msg("a", 1))
	recv(t, running)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	require.Error(t, s.Close(ctx), "Close reports the handler that outlived its ctx")
	close(release)
	recvDone(t, returned)
	assert.Equal(t, bus.OutcomeAcked, recv(t, outcome), "the handler's verdict is recorded")
	recvDone(t, s.Done())
	assert.Empty(t, ev.byScope(observer.ScopeAck), "the refused ack is counted, not reported on its own")
	lease := ev.byScope(observer.ScopeLease)
	require.Len(t, lease, 1, "the refused ack is reported once Done is closed")
	assert.ErrorContains(t, lease[0].Err, "1 late settlement(s)")
	acked, _, _ := f.snapshot()
	assert.NotContains(t, acked, "a", "nothing is sent after the acker closed")
	require.NoError(t, b.Close(context.Background()))
}

// A flush sends the acks workers made when handlers returned and the acks
// made any other way (here Delivery.Ack from a handler) in one backend
// call, not one per buffer.
func TestFlushSendsAcksOfBothBuffersInOneCall(t *testing.T) {
	f := newFakeBackend()
	// A long interval and a large batch: only Close flushes.
	b := bus.New(f, bus.WithAckBatch(100, time.Hour))
	handled := make(chan struct{}, 2)
	s, err := b.Subscribe(context.Background(), "orders", func(_ context.Context, d *bus.Delivery) error {
		defer func() { handled <- struct{}{} }()
		if d.ID == "explicit" {
			return d.Ack(context.Background()) // the acker's own buffer
		}
		return nil // the worker's ack, in its worker's ack buffer
	})
	require.NoError(t, err)
	f.push(msg("explicit", 1), msg("returned", 1))
	recv(t, handled)
	recv(t, handled)
	require.NoError(t, s.Close(context.Background()))
	f.mu.Lock()
	acked, calls := append([]string(nil), f.acked...), f.ackCalls
	f.mu.Unlock()
	assert.ElementsMatch(t, []string{"explicit", "returned"}, acked, "both acks are sent")
	assert.Equal(t, 1, calls, "in one Ack call")
	require.NoError(t, b.Close(context.Background()))
}
