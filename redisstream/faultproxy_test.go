package redisstream_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/faultproxy/faultsuite"
	"github.com/eventbus-go/bus/internal/redistest"
	"github.com/eventbus-go/bus/redisstream"
)

// TestFaultNetwork runs the network-fault suite (resets, blackholes,
// latency, a partition) through TCP fault proxies in front of a private
// redis-server. Backends are opened from a redis:// URL, as applications
// do, so they get the client options a URL gives.
func TestFaultNetwork(t *testing.T) {
	srv := redistest.Start(t)
	faultsuite.Run(t, faultsuite.Harness{
		Target: srv.Addr(),
		Open: func(t testing.TB, addr string) backend.Backend {
			u, err := url.Parse("redis://" + addr)
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			be, err := redisstream.OpenURL(ctx, u)
			require.NoError(t, err, "open a backend through the proxy")
			return be
		},
	})
}
