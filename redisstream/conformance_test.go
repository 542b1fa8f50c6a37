package redisstream_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/conformance"
	"github.com/eventbus-go/bus/internal/redistest"
	"github.com/eventbus-go/bus/redisstream"
)

// TestConformance runs the suite against $BUS_REDIS_URL when set,
// otherwise against a private redis-server.
func TestConformance(t *testing.T) {
	u := redistest.URL(t)
	opts, err := redis.ParseURL(u)
	require.NoError(t, err, "parse the test server URL")
	conformance.Run(t, func(t testing.TB) backend.Backend {
		return newBackend(t, redis.NewClient(opts), nil)
	})
}

// TestConformanceCluster runs the suite against a private 3-master Redis
// Cluster.
func TestConformanceCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster conformance is long; run without -short")
	}
	c := redistest.StartCluster(t, 3)
	conformance.Run(t, func(t testing.TB) backend.Backend {
		return newBackend(t, redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()}), nil)
	})
}

// newBackend returns a backend over client; the client is closed when the
// test ends (the backend never closes a client it was given).
func newBackend(t testing.TB, client redis.UniversalClient, opts *redisstream.Options) *redisstream.Backend {
	t.Helper()
	require.NoError(t, client.Ping(context.Background()).Err(), "ping redis")
	b, err := redisstream.New(client, opts)
	require.NoError(t, err, "redisstream.New")
	t.Cleanup(func() { _ = client.Close() })
	return b
}
