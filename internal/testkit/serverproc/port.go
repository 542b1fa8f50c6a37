package serverproc

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// lowestPort is the lowest port FreePort hands out: above the ports
// services usually listen on.
const lowestPort = 10000

// defaultEphemeralLow is the start of Linux's default ephemeral range
// (below other systems' ranges), for a machine whose range cannot be read.
const defaultEphemeralLow = 32768

var (
	portsMu sync.Mutex
	given   = map[int]bool{} // ports FreePort has returned in this process
)

// FreePort returns a 127.0.0.1 port that is free now, for a server the test
// is about to start. The port lies below the kernel's ephemeral range
// (net.ipv4.ip_local_port_range), where the kernel picks the local ports of
// outgoing connections and of listeners on port 0: a port from that range
// may be taken by any connection between this call and the server's bind,
// which a server that binds late (a RabbitMQ node, seconds into its boot)
// does not survive. No two calls in a process return the same port; the
// start of the search is random, so that test binaries running side by
// side seldom try the same ports. It fails the test when no port is free.
func FreePort(tb testing.TB) int {
	tb.Helper()
	hi := ephemeralLow()
	if hi-lowestPort < 1000 {
		return anyPort(tb) // a machine whose ephemeral range starts low
	}
	portsMu.Lock()
	defer portsMu.Unlock()
	span := hi - lowestPort
	start := rand.IntN(span)
	for i := range span {
		p := lowestPort + (start+i)%span
		if given[p] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		_ = l.Close()
		given[p] = true
		return p
	}
	tb.Fatalf("serverproc: no free 127.0.0.1 port in [%d, %d)", lowestPort, hi)
	return 0
}

// anyPort returns a port the kernel picks for a listener on port 0.
func anyPort(tb testing.TB) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("serverproc: find a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// ephemeralLow returns the first port of the kernel's ephemeral range.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return defaultEphemeralLow
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return defaultEphemeralLow
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil {
		return defaultEphemeralLow
	}
	return lo
}
