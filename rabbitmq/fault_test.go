package rabbitmq_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/testkit/faultproxy/faultsuite"
	"github.com/eventbus-go/bus/internal/testkit/rabbittest"
	"github.com/eventbus-go/bus/rabbitmq"
)

// testFaultNetwork runs the fault suite through proxies to node: resets,
// blackholes, latency, a partition mid-batch and a close mid-run.
func testFaultNetwork(t *testing.T, node *rabbittest.Node) {
	faultsuite.Run(t, faultsuite.Harness{
		Target:      node.Addr(),
		StopServer:  killSaved(t, node),
		StartServer: node.Restart,
		Open:        openThrough(node),
		Skip: map[string]string{
			// RabbitMQ gives a delivery to another consumer only when
			// its holder nacks it or its channel closes. The member
			// cut off here acks its deliveries as the blackhole starts;
			// the acks wait in the link and reach the broker when it
			// heals, 1.5 s later, so the group never gets them again and
			// the case's "redelivered > 0" cannot hold. The broker
			// notices a dead link after two missed heartbeats (at least
			// 2 s, heartbeats being whole seconds), past the blackhole.
			"BlackholeLongerThanAckTimeout": "RabbitMQ moves a delivery only when its holder nacks it or its connection dies (two missed heartbeats, >= 2 s); the acks sent into the 1.5 s blackhole arrive after it",
		},
	})
}

// testFaultNodePause freezes node (SIGSTOP) under load: every call
// returns by its ctx while it is frozen, and a one-member group loses
// nothing through five pauses.
func testFaultNodePause(t *testing.T, node *rabbittest.Node) {
	h := faultsuite.Harness{
		Target:       node.Addr(),
		PauseServer:  node.Pause,
		ResumeServer: node.Resume,
		PauseCases:   []string{"OneMember"},
		Open:         openThrough(node),
	}
	t.Run("BoundsEveryCall", func(t *testing.T) { faultsuite.RunPauseBounds(t, h) })
	faultsuite.RunPause(t, h)
}

// openThrough returns a faultsuite Open that opens a backend on node at
// addr from an amqp:// URL, as applications do, with a short heartbeat
// so that a dead connection is noticed within seconds.
func openThrough(node *rabbittest.Node) func(t testing.TB, addr string) backend.Backend {
	return func(t testing.TB, addr string) backend.Backend {
		u, err := url.Parse(node.URL())
		require.NoError(t, err)
		u.Host = addr
		u.RawQuery = "heartbeat=2s&close_timeout=1s&write_timeout=3s"
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		be, err := rabbitmq.OpenURL(ctx, u)
		require.NoError(t, err, "open a backend through the proxy")
		return be
	}
}

// killSaved returns a StopServer that kills node once it saved the Raft
// metadata of its quorum queues, as it does every five seconds: the
// fault cases create their queues a moment before the kill, and a queue
// that never had its metadata saved comes back without a leader (see
// rabbittest.Node.SaveRaftMeta).
func killSaved(t *testing.T, node *rabbittest.Node) func() {
	return func() {
		require.NoError(t, node.SaveRaftMeta())
		node.Kill()
	}
}
