package bus

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A fetch that waits for the lock while it is lost gets the ctx of the
// hold that opens the gate, not that of the hold that was lost: a Receive
// under the ended one would have its messages dropped, to lapse back
// behind the rest of their keys.
func TestGroupLockWaitReturnsTheCurrentHold(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o := &groupLock{s: &consumer{fetchCtx: ctx}, open: make(chan struct{})}
	o.setOwning(true)
	first, ok := o.wait(ctx)
	require.True(t, ok)
	require.NoError(t, first.Err())

	o.setOwning(false) // the lock is lost: the first hold ends
	require.Error(t, first.Err())
	got := make(chan context.Context, 1)
	go func() {
		held, _ := o.wait(ctx)
		got <- held
	}()
	select {
	case <-got:
		t.Fatal("wait returned while the lock was lost")
	case <-time.After(50 * time.Millisecond): // the waiter blocks on the closed gate
	}
	o.setOwning(true) // held again
	select {
	case held := <-got:
		assert.NoError(t, held.Err(), "the ctx of the current hold")
	case <-time.After(5 * time.Second):
		t.Fatal("wait did not return once the lock was held again")
	}

	o.setOwning(false)
	wctx, wcancel := context.WithCancel(ctx)
	wcancel()
	_, ok = o.wait(wctx)
	assert.False(t, ok, "wait ends with its ctx")
}
