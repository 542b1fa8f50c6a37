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

// deadlineConn records the write deadlines set on it.
type deadlineConn struct {
	net.Conn
	set []time.Time
}

func (c *deadlineConn) SetWriteDeadline(t time.Time) error {
	c.set = append(c.set, t)
	return nil
}

func (c *deadlineConn) SetDeadline(t time.Time) error { return c.SetWriteDeadline(t) }

func (c *deadlineConn) Write(p []byte) (int, error) { return len(p), nil }

// TestSocketWriteAlwaysHasADeadline: a write sets a deadline of the write
// timeout when none is set, when most of it has passed, and after the
// client cleared the connection's deadlines (as amqp091-go does once
// the handshake is over); writes in a burst share one.
func TestSocketWriteAlwaysHasADeadline(t *testing.T) {
	c := &deadlineConn{}
	s := &socket{Conn: c, writeTimeout: time.Hour}
	before := time.Now()
	for range 3 {
		_, err := s.Write([]byte("x"))
		require.NoError(t, err)
	}
	require.Len(t, c.set, 1, "a burst of writes shares one deadline")
	assert.False(t, c.set[0].Before(before.Add(time.Hour)), "the deadline is a write timeout away")

	require.NoError(t, s.SetDeadline(time.Time{}))
	_, err := s.Write([]byte("x"))
	require.NoError(t, err)
	require.Len(t, c.set, 3, "a write after the deadlines were cleared sets its own")
	assert.False(t, c.set[2].IsZero())

	s.deadline.Store(time.Now().Add(time.Hour / 2).UnixNano()) // half of the timeout left
	_, err = s.Write([]byte("x"))
	require.NoError(t, err)
	require.Len(t, c.set, 4, "a write with less than 7/8 of the timeout left moves the deadline")
}
