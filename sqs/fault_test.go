package sqs_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/testkit/awstest"
	"github.com/eventbus-go/bus/internal/testkit/faultproxy/faultsuite"
	"github.com/eventbus-go/bus/sqs"
)

// TestFault runs the fault suite on a moto server of its own, in
// parallel with the conformance suites: network faults through proxies
// on standard topics, then the server frozen (SIGSTOP) under a
// member holding deliveries.
func TestFault(t *testing.T) {
	t.Parallel()
	srv := awstest.Start(t)
	t.Run("Network", func(t *testing.T) { testFaultNetwork(t, srv) })
	t.Run("ServerPause", func(t *testing.T) { testFaultServerPause(t, srv) })
}

// testFaultNetwork runs the fault suite through proxies to srv: resets,
// blackholes, latency, a partition mid-batch and a close mid-run.
func testFaultNetwork(t *testing.T, srv *awstest.Server) {
	faultsuite.Run(t, faultsuite.Harness{
		Target: srv.Addr(),
		Open:   openThrough(""),
		Skip: map[string]string{
			"ServerRestartMidRun": "moto keeps its state in memory: a restarted emulator has no topics, queues or messages (no persistence)",
		},
	})
}

// testFaultServerPause freezes srv (SIGSTOP) with deliveries held:
// every call returns by its ctx while it is frozen, and a new member gets
// every message once it runs again.
func testFaultServerPause(t *testing.T, srv *awstest.Server) {
	h := faultsuite.Harness{
		Target:       srv.Addr(),
		PauseServer:  srv.Pause,
		ResumeServer: srv.Resume,
		Open:         openThrough(""),
	}
	t.Run("BoundsEveryCall", func(t *testing.T) { faultsuite.RunPauseBounds(t, h) })
}

// openThrough returns a faultsuite Open that opens a backend from an
// sqs:// URL whose endpoint is addr (a proxy's, or the server's), with
// fifo as its fifo parameter when not empty.
func openThrough(fifo string) func(t testing.TB, addr string) backend.Backend {
	return func(t testing.TB, addr string) backend.Backend {
		q := url.Values{"endpoint": {"http://" + addr}, "close_timeout": {"1s"}}
		if fifo != "" {
			q.Set("fifo", fifo)
		}
		u := &url.URL{Scheme: "sqs", Host: awstest.Region, RawQuery: q.Encode()}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		be, err := sqs.OpenURL(ctx, u)
		require.NoError(t, err, "open a backend through the proxy")
		return be
	}
}
