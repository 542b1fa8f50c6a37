package faultproxy_test

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/eventbus-go/bus/internal/testkit/faultproxy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// ioTimeout bounds every read a test expects to succeed; absence checks
// use quiet instead.
const (
	ioTimeout = 10 * time.Second
	quiet     = 200 * time.Millisecond
)

// echoServer echoes every connection and remembers what it received and
// how each connection ended.
type echoServer struct {
	ln       net.Listener
	wg       sync.WaitGroup
	received atomic.Int64
	mu       sync.Mutex
	ends     []error // the read error that ended each connection
	conns    []net.Conn
}

func startEcho(t *testing.T) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &echoServer{ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer c.Close()
				buf := make([]byte, 4096)
				for {
					n, err := c.Read(buf)
					s.received.Add(int64(n))
					if n > 0 {
						if _, werr := c.Write(buf[:n]); werr != nil {
							err = werr
						}
					}
					if err != nil {
						s.mu.Lock()
						s.ends = append(s.ends, err)
						s.mu.Unlock()
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		s.mu.Lock()
		for _, c := range s.conns {
			_ = c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *echoServer) endings() []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]error(nil), s.ends...)
}

func startProxy(t *testing.T, target string) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.New(target)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	return p
}

func dial(t *testing.T, p *faultproxy.Proxy) *net.TCPConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr(), ioTimeout)
	require.NoError(t, err, "dial the proxy")
	t.Cleanup(func() { _ = c.Close() })
	return c.(*net.TCPConn)
}

// roundTrip writes msg and reads the echo within ioTimeout.
func roundTrip(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	_, err := c.Write([]byte(msg))
	require.NoError(t, err, "write %q", msg)
	expectEcho(t, c, msg)
}

func expectEcho(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(ioTimeout)))
	buf := make([]byte, len(msg))
	_, err := io.ReadFull(c, buf)
	require.NoError(t, err, "read the echo of %q", msg)
	require.Equal(t, msg, string(buf), "the echo carries the bytes unchanged")
}

// expectSilence checks that nothing arrives on c for quiet.
func expectSilence(t *testing.T, c net.Conn) {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(quiet)))
	n, err := c.Read(make([]byte, 1))
	require.Zero(t, n, "no byte may arrive through a blackhole")
	require.ErrorIs(t, err, os.ErrDeadlineExceeded, "the read only times out")
}

func TestProxyForwardsBothWaysByteExact(t *testing.T) {
	echo := startEcho(t)
	p := startProxy(t, echo.ln.Addr().String())
	c := dial(t, p)
	big := make([]byte, 300<<10) // several chunks
	for i := range big {
		big[i] = byte(i * 7)
	}
	roundTrip(t, c, "hello")
	roundTrip(t, c, string(big))
	assert.EqualValues(t, 1, p.Accepted())
	assert.Equal(t, 1, p.Live())
}

func TestProxyResetSendsRSTToBothSidesAndAcceptsNewConnections(t *testing.T) {
	echo := startEcho(t)
	p := startProxy(t, echo.ln.Addr().String())
	c := dial(t, p)
	roundTrip(t, c, "before")

	require.Equal(t, 1, p.Reset(), "one live connection is reset")
	require.NoError(t, c.SetReadDeadline(time.Now().Add(ioTimeout)))
	_, err := c.Read(make([]byte, 1))
	require.ErrorIs(t, err, syscall.ECONNRESET, "the client sees a reset, not a clean close")
	require.Eventually(t, func() bool {
		ends := echo.endings()
		return len(ends) == 1 && errors.Is(ends[0], syscall.ECONNRESET)
	}, ioTimeout, 5*time.Millisecond, "the server side sees a reset too: %v", echo.endings())
	require.Eventually(t, func() bool { return p.Live() == 0 }, ioTimeout, 5*time.Millisecond)

	roundTrip(t, dial(t, p), "after") // recovery: no restart needed
}

func TestProxyBlackholeHoldsBytesBothWaysUntilLifted(t *testing.T) {
	echo := startEcho(t)
	p := startProxy(t, echo.ln.Addr().String())
	c := dial(t, p)
	roundTrip(t, c, "warm")
	received := echo.received.Load()

	p.Blackhole(true)
	require.True(t, p.Blackholed())
	_, err := c.Write([]byte("held"))
	require.NoError(t, err)
	late := dial(t, p) // new connections are accepted...
	_, err = late.Write([]byte("late"))
	require.NoError(t, err)
	expectSilence(t, c)
	expectSilence(t, late)
	require.Equal(t, received, echo.received.Load(), "...but nothing reaches the server")
	require.EqualValues(t, 2, p.Accepted())

	p.Blackhole(false)
	require.False(t, p.Blackholed())
	expectEcho(t, c, "held")
	expectEcho(t, late, "late")

	// Server to client is held too: bytes the server sends during a
	// blackhole reach the client only after it lifts.
	p.Blackhole(true)
	p.Blackhole(true) // idempotent
	echo.mu.Lock()
	server := echo.conns[0]
	echo.mu.Unlock()
	_, err = server.Write([]byte("push"))
	require.NoError(t, err)
	expectSilence(t, c)
	p.Blackhole(false)
	p.Blackhole(false)
	expectEcho(t, c, "push")
}

func TestProxyPartitionHealsByItself(t *testing.T) {
	echo := startEcho(t)
	p := startProxy(t, echo.ln.Addr().String())
	c := dial(t, p)
	roundTrip(t, c, "warm")

	const d = 300 * time.Millisecond
	start := time.Now()
	healed := p.Partition(d)
	require.True(t, p.Blackholed())
	_, err := c.Write([]byte("through"))
	require.NoError(t, err)
	expectEcho(t, c, "through")
	assert.GreaterOrEqual(t, time.Since(start), d, "the echo waits for the partition to heal")
	select {
	case <-healed:
	case <-time.After(ioTimeout):
		t.Fatal("the partition never reported healing")
	}
	assert.False(t, p.Blackholed())
}

func TestProxyLatencyDelaysEachDirection(t *testing.T) {
	echo := startEcho(t)
	p := startProxy(t, echo.ln.Addr().String())
	c := dial(t, p)
	roundTrip(t, c, "warm")

	const lat = 50 * time.Millisecond
	p.SetLatency(lat)
	start := time.Now()
	roundTrip(t, c, "slow")
	assert.GreaterOrEqual(t, time.Since(start), 2*lat, "one latency each way")

	// Pipelined: ten chunks in flight take about one latency each way, not
	// ten. Checked as a lower bound only, to stay robust on slow runners.
	start = time.Now()
	for range 10 {
		_, err := c.Write([]byte("p"))
		require.NoError(t, err)
	}
	expectEcho(t, c, "pppppppppp")
	assert.GreaterOrEqual(t, time.Since(start), 2*lat)

	p.SetLatency(0)
	roundTrip(t, c, "fast")
}

func TestProxyForwardsHalfClose(t *testing.T) {
	echo := startEcho(t)
	p := startProxy(t, echo.ln.Addr().String())
	c := dial(t, p)
	_, err := c.Write([]byte("bye"))
	require.NoError(t, err)
	require.NoError(t, c.CloseWrite())
	require.NoError(t, c.SetReadDeadline(time.Now().Add(ioTimeout)))
	got, err := io.ReadAll(c)
	require.NoError(t, err, "the server closes cleanly after the client's FIN")
	require.Equal(t, "bye", string(got))
	require.Eventually(t, func() bool { return p.Live() == 0 }, ioTimeout, 5*time.Millisecond)
}

func TestProxyClosesClientWhenTargetIsDown(t *testing.T) {
	// A port freed on 127.0.0.2, where the other tests' servers (bound to
	// 127.0.0.1) cannot take it over between the close and the dial.
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	require.NoError(t, err)
	target := ln.Addr().String()
	require.NoError(t, ln.Close())
	p := startProxy(t, target)
	c, err := net.DialTimeout("tcp", p.Addr(), ioTimeout)
	if err == nil { // the reset may already come with the handshake
		defer c.Close()
		require.NoError(t, c.SetReadDeadline(time.Now().Add(ioTimeout)))
		_, err = c.Read(make([]byte, 1))
	}
	require.Error(t, err, "a client of an unreachable target is disconnected")
	require.NotErrorIs(t, err, os.ErrDeadlineExceeded)
}

func TestProxyCloseEndsEveryConnectionAndGoroutine(t *testing.T) {
	echo := startEcho(t)
	p, err := faultproxy.New(echo.ln.Addr().String())
	require.NoError(t, err)
	c := dial(t, p)
	roundTrip(t, c, "warm")
	p.SetLatency(time.Hour)
	p.Partition(time.Hour)
	_, err = c.Write([]byte("held forever"))
	require.NoError(t, err)

	closed := make(chan error, 1)
	go func() { closed <- p.Close() }()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(ioTimeout):
		t.Fatal("Close must not wait for held data, latency or a partition")
	}
	require.NoError(t, c.SetReadDeadline(time.Now().Add(ioTimeout)))
	_, err = c.Read(make([]byte, 1))
	require.Error(t, err, "the client connection is closed")
	require.NotErrorIs(t, err, os.ErrDeadlineExceeded)
	require.NoError(t, p.Close(), "a second Close is a no-op")
	_, err = net.DialTimeout("tcp", p.Addr(), time.Second)
	require.Error(t, err, "a closed proxy accepts nothing")
	<-p.Partition(time.Hour) // a closed proxy does not partition
}
