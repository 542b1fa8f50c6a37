package nats_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/testkit/faultproxy/faultsuite"
	"github.com/eventbus-go/bus/internal/testkit/natstest"
	busnats "github.com/eventbus-go/bus/nats"
)

// TestFaultNetworkCluster runs the fault suite unchanged on a 3-node
// cluster with R3 streams. The proxies front the first node, which does
// not advertise the others to clients, so that every connection of the
// bus goes through a proxy; the restart case stops and restarts that
// node while the other two keep the streams' quorum.
func TestFaultNetworkCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the single-server fault suite covers the backend; this one covers replicated streams")
	}
	c := natstest.StartCluster(t, 3, func(o *server.Options) { o.Cluster.NoAdvertise = true })
	srv := c.Servers[0]
	faultsuite.Run(t, faultsuite.Harness{
		Target:      strings.TrimPrefix(srv.URL(), "nats://"),
		StopServer:  srv.Shutdown,
		StartServer: srv.Restart,
		Open: func(t testing.TB, addr string) backend.Backend {
			return connect(t, "nats://"+addr, busnats.Options{ReconnectWait: 50 * time.Millisecond, Replicas: 3})
		},
	})
}
