package sqs_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/testkit/awstest"
	"github.com/eventbus-go/bus/internal/testkit/faultproxy"
	"github.com/eventbus-go/bus/internal/testkit/faultproxy/faultsuite"
	"github.com/eventbus-go/bus/observer"
	"github.com/eventbus-go/bus/sqs"
)

// TestFault runs the fault suite on a moto server of its own, before the
// parallel conformance suites start, so that no other emulator competes
// for the CPU: network faults through proxies on standard topics, then
// the server frozen (SIGSTOP), with a member holding deliveries on
// standard topics and under a key-ordered group on FIFO topics, and the
// bounds of Receive and the Closes over a blackhole.
func TestFault(t *testing.T) {
	srv := awstest.Start(t)
	t.Run("Network", func(t *testing.T) { testFaultNetwork(t, srv) })
	t.Run("ServerPause", func(t *testing.T) { testFaultServerPause(t, srv) })
	t.Run("CloseBoundedOnBlackhole", func(t *testing.T) { testCloseBoundedOnBlackhole(t, srv) })
	t.Run("RequestBoundedWithoutDeadline", func(t *testing.T) { testRequestBoundedWithoutDeadline(t, srv) })
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

// testFaultServerPause freezes srv (SIGSTOP): every call returns by its
// ctx while it is frozen (a member holding deliveries on standard
// topics), and a key-ordered group of one member, then of two, on FIFO
// topics loses nothing, handles nothing twice or out of its key's order,
// and waits for no lease through five pauses. Standard queues keep no
// order, so the key-ordered cases run on FIFO topics, with 1,000
// messages instead of 3,000: moto (one Python process, a TCP connection
// a request) answers too few requests a second on a loaded machine to
// drain 3,000 within the cases' 10 s. FourPartitions needs partitioned
// topics (backend.Partitioner), which this backend has not.
func testFaultServerPause(t *testing.T, srv *awstest.Server) {
	h := faultsuite.Harness{
		Target:       srv.Addr(),
		PauseServer:  srv.Pause,
		ResumeServer: srv.Resume,
		Open:         openThrough(""),
	}
	t.Run("BoundsEveryCall", func(t *testing.T) { faultsuite.RunPauseBounds(t, h) })
	h.Open = openThrough("true")
	h.PauseCases = []string{"OneMember", "TwoMembers"}
	h.PauseMessages = 1000
	faultsuite.RunPause(t, h)
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

// testCloseBoundedOnBlackhole: over a blackholed link, with a delivery
// unsettled and a Receive waiting, a Receive with a 300 ms ctx returns
// by it, Subscription.Close returns at once and ends the waiting
// Receive, and Backend.Close cancels the receive requests still running
// and returns within its CloseTimeout (1 s).
func testCloseBoundedOnBlackhole(t *testing.T, srv *awstest.Server) {
	p, err := faultproxy.New(srv.Addr())
	require.NoError(t, err)
	defer p.Close()
	be := openThrough("")(t, p.Addr())
	defer be.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const topic = "close.blackhole"
	sub, err := be.Subscribe(ctx, topic, backend.SubscribeConfig{Group: "g", AckTimeout: time.Minute, MaxInFlight: 4, MaxDeliveries: 5, Observer: observer.Nop()})
	require.NoError(t, err)
	require.NoError(t, be.Publish(ctx, topic, []*backend.Message{{ID: "m0", Payload: []byte("x"), PublishedAt: time.Now()}}))
	var got []*backend.Message
	require.Eventually(t, func() bool {
		m, err := sub.Receive(ctx, 4)
		require.NoError(t, err)
		got = append(got, m...)
		return len(got) > 0
	}, 20*time.Second, time.Millisecond, "a delivery arrives")

	p.Blackhole(true)
	defer p.Blackhole(false)
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	start := time.Now()
	_, err = sub.Receive(short, 4)
	cancelShort()
	took := time.Since(start)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, took, 300*time.Millisecond+faultsuite.Grace, "Receive returns by its ctx over a blackhole")

	waiting := make(chan error, 1)
	go func() {
		_, err := sub.Receive(ctx, 4)
		waiting <- err
	}()
	start = time.Now()
	require.NoError(t, sub.Close())
	assert.Less(t, time.Since(start), faultsuite.Grace, "Subscription.Close returns at once")
	select {
	case err := <-waiting:
		require.ErrorIs(t, err, backend.ErrClosed, "the waiting Receive ends with the subscription")
	case <-time.After(time.Second):
		t.Fatal("a Receive waiting over a blackhole did not end with Subscription.Close")
	}
	t.Logf("Subscription.Close and the end of the waiting Receive over a blackhole: %v", time.Since(start).Round(time.Millisecond))

	start = time.Now()
	require.NoError(t, be.Close(), "the abandoned receive requests end when Close cancels them")
	took = time.Since(start)
	t.Logf("Backend.Close over a blackhole with two receive requests abandoned: %v (close_timeout 1s)", took.Round(time.Millisecond))
	assert.Less(t, took, time.Second+faultsuite.Grace, "Backend.Close returns within its CloseTimeout")
}

// testRequestBoundedWithoutDeadline: over a blackholed link, a Publish
// whose ctx has no deadline returns an error within the backend's
// RequestTimeout (request_timeout=5s).
func testRequestBoundedWithoutDeadline(t *testing.T, srv *awstest.Server) {
	p, err := faultproxy.New(srv.Addr())
	require.NoError(t, err)
	defer p.Close()
	q := url.Values{"endpoint": {"http://" + p.Addr()}, "close_timeout": {"1s"}, "request_timeout": {"5s"}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	be, err := sqs.OpenURL(ctx, &url.URL{Scheme: "sqs", Host: awstest.Region, RawQuery: q.Encode()})
	require.NoError(t, err)
	defer be.Close()
	const topic = "request.blackhole"
	msg := func(id string) []*backend.Message {
		return []*backend.Message{{ID: id, Payload: []byte("x"), PublishedAt: time.Now()}}
	}
	require.NoError(t, be.Publish(ctx, topic, msg("m0")), "the topic exists before the blackhole")

	p.Blackhole(true)
	defer p.Blackhole(false)
	start := time.Now()
	err = be.Publish(context.Background(), topic, msg("m1"))
	took := time.Since(start)
	require.Error(t, err, "a Publish over a blackhole fails")
	t.Logf("Publish without a deadline over a blackhole: %v (request_timeout 5s): %v", took.Round(time.Millisecond), err)
	assert.Less(t, took, 5*time.Second+faultsuite.Grace, "the request ends by the backend's RequestTimeout")
}
