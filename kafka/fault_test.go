package kafka_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/testkit/faultproxy/faultsuite"
	"github.com/eventbus-go/bus/internal/testkit/kafkatest"
	"github.com/eventbus-go/bus/kafka"
)

// testFaultNetwork runs the fault suite through proxies to node: resets,
// blackholes, latency, a partition mid-batch, a close mid-run and a
// restart of the broker with its data.
func testFaultNetwork(t *testing.T, node *kafkatest.Node) {
	faultsuite.Run(t, faultsuite.Harness{
		Target:      node.Addr(),
		StopServer:  node.Kill,
		StartServer: node.Restart,
		Open:        openThrough(node),
		Skip: map[string]string{
			// A member settles an ack at once and commits it when it
			// can: acks made while its link is cut off are committed
			// once it heals, so no lease runs out, and its partitions
			// move to another member only after the group session
			// (6 s here), not within the case's 1.5 s blackhole.
			"BlackholeLongerThanAckTimeout": "acks are settled in the member and committed when the link heals; partitions move after the session timeout, not the lease (see the package doc)",
		},
	})
}

// testFaultBrokerPause freezes the broker (SIGSTOP) under load: every
// call returns by its ctx while it is frozen, and a one-member group
// loses nothing through five pauses.
func testFaultBrokerPause(t *testing.T, node *kafkatest.Node) {
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

// openThrough returns a faultsuite Open that opens a backend on node
// whose every connection goes to addr: the broker advertises its own
// address, so the backend's Dial sends each connection to the proxy.
func openThrough(node *kafkatest.Node) func(t testing.TB, addr string) backend.Backend {
	return func(t testing.TB, addr string) backend.Backend {
		d := &net.Dialer{Timeout: 2 * time.Second}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		be, err := kafka.New(ctx, &kafka.Options{
			Seeds:          []string{node.Addr()},
			RequestTimeout: 3 * time.Second,
			SessionTimeout: 6 * time.Second,
			CloseTimeout:   500 * time.Millisecond,
			Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return d.DialContext(ctx, network, addr)
			},
		})
		require.NoError(t, err, "open a backend through the proxy")
		return be
	}
}
