package redistest

import (
	"context"
	"os"
	"slices"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestStartAnswersPingAndRestartKeepsAppendOnlyData(t *testing.T) {
	s := Start(t, "--appendonly", "yes", "--appendfsync", "always")
	_, err := command(s.Addr(), "SET k v")
	require.NoError(t, err, "SET on a fresh server")

	s.Kill()
	_, err = command(s.Addr(), "PING")
	require.Error(t, err, "a killed server must not answer")

	s.Restart()
	v, err := command(s.Addr(), "GET k")
	require.NoError(t, err, "GET after restart")
	require.Equal(t, "v", v, "appendonly data must survive kill and restart")
}

func TestDefaultServerHasNoPersistence(t *testing.T) {
	s := Start(t)
	_, err := command(s.Addr(), "SET k v")
	require.NoError(t, err)
	s.Restart()
	_, err = command(s.Addr(), "GET k")
	require.ErrorIs(t, err, errNilReply, "a server without persistence must come back empty")
}

func TestURLPrefersEnvironment(t *testing.T) {
	t.Setenv(EnvURL, "redis://example:1")
	require.Equal(t, "redis://example:1", URL(t))
	os.Unsetenv(EnvURL)
	require.Contains(t, URL(t), "redis://127.0.0.1:", "without the variable a private server is started")
}

func TestStartClusterReachesStateOK(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster start takes a few seconds")
	}
	c := StartCluster(t, 3)
	require.Len(t, c.Addrs(), 3)
	info, err := command(c.Nodes[0].Addr(), "CLUSTER INFO")
	require.NoError(t, err)
	require.Contains(t, info, "cluster_state:ok")
	for _, n := range c.Nodes {
		// The cluster bus listens on the port the harness checked, not
		// on the node's port + 10000, which nobody checked (it may lie
		// in the kernel's ephemeral range).
		i := slices.Index(n.args, "--cluster-port")
		require.GreaterOrEqual(t, i, 0, "the harness gives node %s a cluster port", n.Addr())
		rdb := redis.NewClient(&redis.Options{Addr: n.Addr()})
		got, err := rdb.ConfigGet(context.Background(), "cluster-port").Result()
		_ = rdb.Close()
		require.NoError(t, err)
		assert.Equal(t, n.args[i+1], got["cluster-port"], "node %s listens for the cluster bus on the harness's port", n.Addr())
	}
}
