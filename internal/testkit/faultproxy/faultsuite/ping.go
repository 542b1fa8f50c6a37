package faultsuite

import (
	"context"
	"errors"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	bus "github.com/eventbus-go/bus"
)

// testPingBoundedOnDeadNetwork pings through a proxy: the broker answers;
// with the proxy blackholed each Ping (300 ms ctx) fails within its ctx
// plus Grace; once it heals, and after a reset of every connection, Ping
// answers again. A backend without a Pinger skips it.
func testPingBoundedOnDeadNetwork(e *env) {
	p := e.proxy()
	b := e.bus(p)
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	err := b.Ping(ctx)
	cancel()
	if errors.Is(err, bus.ErrUnsupported) {
		e.t.Skipf("the backend cannot ping: %v", err)
	}
	require.NoError(e.t, err, "the broker answers a ping through the proxy")

	p.Blackhole(true)
	for range 3 {
		err := e.calls.timed("Ping(300ms ctx, blackhole)", 300*time.Millisecond, b.Ping)
		assert.ErrorIs(e.t, err, context.DeadlineExceeded, "a ping over a dead network fails with its ctx")
	}
	p.Blackhole(false)
	e.pingRecovers(b, "after the blackhole")

	p.Reset()
	e.pingRecovers(b, "after a reset of every connection")
	e.calls.log(e.t)
	e.calls.assertWithinCtx(e.t)
}

// pingRecovers waits until a Ping on b answers.
func (e *env) pingRecovers(b *bus.Bus, when string) {
	e.t.Helper()
	require.Eventually(e.t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		return b.Ping(ctx) == nil
	}, recoverWithin, poll, "a ping answers %s", when)
}
