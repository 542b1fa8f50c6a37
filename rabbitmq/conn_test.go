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

// countConn counts the writes that reach it and fails them once fail is
// set.
type countConn struct {
	net.Conn
	writes atomic.Int64
	bytes  atomic.Int64
	fail   atomic.Bool
	closed atomic.Bool
}

func (c *countConn) Write(p []byte) (int, error) {
	if c.fail.Load() {
		return 0, net.ErrClosed
	}
	c.writes.Add(1)
	c.bytes.Add(int64(len(p)))
	return len(p), nil
}

func (c *countConn) SetWriteDeadline(time.Time) error { return nil }
func (c *countConn) Close() error                     { c.closed.Store(true); return nil }

// TestSocketCorkGathersWrites: a corked socket sends what it was given
// in one write when it is uncorked, writes at once what would pass
// corkMax, and a failed write is returned by every later call and
// closes the connection.
func TestSocketCorkGathersWrites(t *testing.T) {
	c := &countConn{}
	s := &socket{Conn: c, writeTimeout: time.Second}

	n, err := s.Write([]byte("plain"))
	require.NoError(t, err)
	assert.Equal(t, 5, n)
	assert.Equal(t, int64(1), c.writes.Load(), "an uncorked write goes out at once")

	s.cork()
	for range 16 {
		_, err := s.Write(make([]byte, 100))
		require.NoError(t, err)
	}
	assert.Equal(t, int64(1), c.writes.Load(), "corked writes wait")
	require.NoError(t, s.uncork())
	assert.Equal(t, int64(2), c.writes.Load(), "uncork sends them in one write")
	assert.Equal(t, int64(5+1600), c.bytes.Load(), "every byte is sent")

	s.cork()
	_, err = s.Write(make([]byte, corkMax-10))
	require.NoError(t, err)
	_, err = s.Write(make([]byte, 20))
	require.NoError(t, err)
	assert.Equal(t, int64(4), c.writes.Load(), "a write that would pass corkMax sends the gathered bytes, then itself")
	require.NoError(t, s.uncork())
	assert.Equal(t, int64(4), c.writes.Load(), "nothing is left to send")

	s.cork()
	_, err = s.Write([]byte("lost"))
	require.NoError(t, err)
	c.fail.Store(true)
	require.Error(t, s.uncork(), "a failed flush is the uncork's error")
	assert.True(t, c.closed.Load(), "a failed flush closes the connection")
	_, err = s.Write([]byte("after"))
	require.Error(t, err, "a write after a failed one fails")
}
