package rabbitmq

import (
	"context"
	"errors"
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

// writesConn records the writes made on it; a write fails with fail when
// it is set, and Close records that it was called.
type writesConn struct {
	deadlineConn
	writes [][]byte
	fail   error
	closed bool
}

func (c *writesConn) Write(p []byte) (int, error) {
	if c.fail != nil {
		return 0, c.fail
	}
	c.writes = append(c.writes, append([]byte(nil), p...))
	return len(p), nil
}

func (c *writesConn) Close() error {
	c.closed = true
	return nil
}

// TestCorkedSocketWritesOnceInOrder: writes to a corked socket are held
// and go out in one write, in order, when the last cork is lifted or
// when corkLimit bytes would be held; a held write that fails closes the
// connection and fails every later write.
func TestCorkedSocketWritesOnceInOrder(t *testing.T) {
	c := &writesConn{}
	s := &socket{Conn: c, writeTimeout: time.Hour}
	write := func(b string) {
		t.Helper()
		n, err := s.Write([]byte(b))
		require.NoError(t, err)
		require.Equal(t, len(b), n)
	}

	write("a")
	require.Equal(t, [][]byte{[]byte("a")}, c.writes, "an uncorked write goes out at once")

	s.cork()
	write("b")
	s.cork() // a second caller
	write("c")
	require.Len(t, c.writes, 1, "corked writes are held")
	s.uncork()
	require.Equal(t, []byte("bc"), c.writes[1], "lifting a cork writes what is held, in order, in one write")
	write("d")
	s.uncork()
	require.Equal(t, [][]byte{[]byte("a"), []byte("bc"), []byte("d")}, c.writes, "the last uncork writes the rest")
	write("e")
	require.Equal(t, []byte("e"), c.writes[3], "uncorked again: at once")

	s.cork()
	write("f")
	big := string(make([]byte, corkLimit))
	write(big)
	require.Equal(t, []byte("f"), c.writes[4], "a write past the limit first writes what is held")
	require.Len(t, c.writes[5], corkLimit, "then itself")
	s.uncork()
	require.Len(t, c.writes, 6, "nothing was left held")

	s.cork()
	write("g")
	c.fail = errors.New("broken pipe")
	s.uncork()
	assert.True(t, c.closed, "a held write that failed closes the connection")
	c.fail = nil
	_, err := s.Write([]byte("h"))
	require.ErrorContains(t, err, "broken pipe", "and every later write fails")
	require.Len(t, c.writes, 6)
}
