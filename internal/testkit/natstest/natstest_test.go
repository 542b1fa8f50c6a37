package natstest_test

import (
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/eventbus-go/bus/internal/testkit/natstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, natstest.LeakIgnores()...) }

func TestStartServesJetStreamAndRestartKeepsStreams(t *testing.T) {
	s := natstest.Start(t)
	nc, err := natsgo.Connect(s.URL(), natsgo.MaxReconnects(-1), natsgo.ReconnectWait(20*time.Millisecond))
	require.NoError(t, err, "connect to the embedded server")
	defer nc.Close()
	js, err := nc.JetStream()
	require.NoError(t, err)
	_, err = js.AddStream(&natsgo.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Storage: natsgo.FileStorage})
	require.NoError(t, err, "JetStream must be enabled")
	_, err = js.Publish("t.a", []byte("x"))
	require.NoError(t, err)

	port := s.URL()
	s.Restart()
	require.Equal(t, port, s.URL(), "restart must keep the port")
	require.Eventually(t, nc.IsConnected, 10*time.Second, 10*time.Millisecond, "client must reconnect after restart")
	info, err := js.StreamInfo("T")
	require.NoError(t, err, "stream must survive the restart")
	require.Equal(t, uint64(1), info.State.Msgs, "stored message must survive the restart")

	s.Shutdown()
	require.False(t, s.Running())
	s.Shutdown() // idempotent
}

func TestURLPrefersEnvironment(t *testing.T) {
	t.Setenv(natstest.EnvURL, "nats://127.0.0.1:1")
	require.Equal(t, "nats://127.0.0.1:1", natstest.URL(t))
}
