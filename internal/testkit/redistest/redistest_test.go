package redistest

import (
	"os"
	"testing"

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
}
