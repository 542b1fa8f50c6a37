package serverproc_test

import (
	"net"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/internal/testkit/serverproc"
)

func TestFreePortIsBindableUniqueAndBelowTheEphemeralRange(t *testing.T) {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		low, err = strconv.Atoi(strings.Fields(string(b))[0])
		require.NoError(t, err)
	}
	seen := map[int]bool{}
	for range 200 {
		p := serverproc.FreePort(t)
		assert.False(t, seen[p], "port %d handed out twice", p)
		seen[p] = true
		if low >= 11000 {
			assert.GreaterOrEqual(t, p, 10000)
			assert.Less(t, p, low, "no outgoing connection takes a port below the ephemeral range")
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		require.NoError(t, err, "port %d is free", p)
		_ = l.Close()
	}
}
