package nats_test

import (
	"strings"
	"testing"
	"time"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/testkit/faultproxy/faultsuite"
	"github.com/eventbus-go/bus/internal/testkit/natstest"
	busnats "github.com/eventbus-go/bus/nats"
)

// TestFaultNetwork runs the fault suite (resets, blackholes, latency, a
// partition, close mid-run, a server restart) through TCP fault proxies in
// front of a private JetStream server with file storage.
func TestFaultNetwork(t *testing.T) {
	srv := natstest.Start(t)
	faultsuite.Run(t, faultsuite.Harness{
		Target:      strings.TrimPrefix(srv.URL(), "nats://"),
		StopServer:  srv.Shutdown,
		StartServer: srv.Restart,
		Open: func(t testing.TB, addr string) backend.Backend {
			return connect(t, "nats://"+addr, busnats.Options{ReconnectWait: 50 * time.Millisecond})
		},
	})
}

// TestFaultBrokerPause runs the broker-pause cases: a key-ordered group
// consumes while a private nats-server process (the one on PATH, or
// Debian's /usr/sbin/nats-server) is frozen (SIGSTOP) five times
// (400 ms, once 1.2 s), so pull requests are answered after the client gave up on
// them: nothing lost, out of order or waiting for its AckWait.
func TestFaultBrokerPause(t *testing.T) {
	srv := natstest.StartProcess(t)
	faultsuite.RunPause(t, faultsuite.Harness{
		Target:       strings.TrimPrefix(srv.URL(), "nats://"),
		PauseServer:  srv.Pause,
		ResumeServer: srv.Resume,
		Open: func(t testing.TB, addr string) backend.Backend {
			return connect(t, "nats://"+addr, busnats.Options{ReconnectWait: 50 * time.Millisecond})
		},
	})
}
