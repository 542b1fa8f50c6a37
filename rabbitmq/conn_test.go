package rabbitmq

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRedialBacksOff: calls that find the broker refusing every
// connection dial with a growing backoff, not once each, and each
// returns by its ctx with the dial's error.
func TestRedialBacksOff(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var accepted atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			_ = c.Close() // a broker that is starting: it drops the handshake
		}
	}()
	defer func() { _ = ln.Close(); <-done }()

	opts, err := (&Options{DialTimeout: time.Second}).withDefaults()
	require.NoError(t, err)
	b := &Backend{url: "amqp://guest:guest@" + ln.Addr().String() + "/", opts: opts}
	l := &link{b: b, name: "publish"}
	const calls = 40
	start := time.Now()
	for range calls {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		callStart := time.Now()
		conn, err := l.get(ctx)
		cancel()
		assert.Nil(t, conn)
		assert.Error(t, err, "no connection, an error")
		assert.Less(t, time.Since(callStart), 500*time.Millisecond, "a call returns by its ctx")
		time.Sleep(5 * time.Millisecond) // the application's pacing, not synchronisation
	}
	elapsed := time.Since(start)
	// Dials wait 25, 50, 100, 200, 400 ms, then 1 s after each other.
	var maxDials int64
	for gap, at := redialBase, time.Duration(0); at <= elapsed; gap = min(2*gap, redialMax) {
		maxDials++
		at += gap
	}
	maxDials += 2 // dials that ended with their caller's ctx, which start no backoff
	t.Logf("%d calls in %v dialed %d times", calls, elapsed, accepted.Load())
	assert.LessOrEqual(t, accepted.Load(), min(maxDials, calls/2), "dials back off")
	assert.Positive(t, accepted.Load())
}
