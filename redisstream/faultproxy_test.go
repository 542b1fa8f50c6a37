package redisstream_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/testkit/faultproxy/faultsuite"
	"github.com/eventbus-go/bus/internal/testkit/redistest"
	"github.com/eventbus-go/bus/redisstream"
)

// TestFaultNetwork runs the fault suite (resets, blackholes, latency, a
// partition, close mid-run, a server restart) through TCP fault proxies in
// front of a private redis-server that persists every write, so a killed
// and restarted server keeps what it acknowledged. Backends are opened
// from a redis:// URL, as applications do, so they get the client
// options a URL gives.
func TestFaultNetwork(t *testing.T) {
	srv := redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always")
	faultsuite.Run(t, faultsuite.Harness{
		Target:      srv.Addr(),
		StopServer:  srv.Kill,
		StartServer: srv.Restart,
		Open:        openURL,
	})
}

// TestFaultBrokerPause runs the broker-pause cases: a key-ordered group
// consumes while a private redis-server is frozen (SIGSTOP) five times
// (400 ms, once 1.2 s), so reads get their replies after the client gave up on
// them. What such a read took is taken back before anything after it:
// nothing lost, out of order or waiting for its lease.
func TestFaultBrokerPause(t *testing.T) {
	srv := redistest.Start(t)
	faultsuite.RunPause(t, faultsuite.Harness{
		Target:       srv.Addr(),
		PauseServer:  srv.Pause,
		ResumeServer: srv.Resume,
		Open:         openURL,
	})
}

// openURL opens a backend on addr from a redis:// URL, as applications do,
// so it gets the client options a URL gives.
func openURL(t testing.TB, addr string) backend.Backend {
	u, err := url.Parse("redis://" + addr)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	be, err := redisstream.OpenURL(ctx, u)
	require.NoError(t, err, "open a backend through the proxy")
	return be
}
