package nats_test

import (
	"strings"
	"testing"
	"time"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/faultproxy/faultsuite"
	"github.com/eventbus-go/bus/internal/natstest"
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
