package nats_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/testkit/faultproxy"
	"github.com/eventbus-go/bus/internal/testkit/natstest"
	busnats "github.com/eventbus-go/bus/nats"
)

// slowLink returns a backend connected through a proxy that delays every
// chunk by latency once the topic's stream exists, with a publish window
// of window messages.
func slowLink(t *testing.T, topic string, window int, latency time.Duration) *busnats.Backend {
	t.Helper()
	srv := natstest.Start(t)
	p, err := faultproxy.New(strings.TrimPrefix(srv.URL(), "nats://"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	be := connect(t, "nats://"+p.Addr(), busnats.Options{PublishWindow: window})
	t.Cleanup(func() { _ = be.Close() })
	require.NoError(t, be.Publish(context.Background(), topic, []*backend.Message{{ID: "first", Payload: []byte("x")}}), "create the stream")
	p.SetLatency(latency)
	return be
}

// TestConcurrentPublishesShareTheWindow publishes from many goroutines
// through a window far smaller than what they send, on a link slow
// enough that callers wait longer for a free slot than the client
// library's own wait (200ms): every call still ends with every message
// stored, and the stream holds each message once.
func TestConcurrentPublishesShareTheWindow(t *testing.T) {
	const topic = "window.shared"
	be := slowLink(t, topic, 2, 150*time.Millisecond)
	const callers, perCall = 4, 3
	var wg sync.WaitGroup
	errs := make([]error, callers)
	for c := range callers {
		wg.Go(func() {
			msgs := make([]*backend.Message, perCall)
			for i := range msgs {
				msgs[i] = &backend.Message{ID: fmt.Sprintf("c%d-%d", c, i), Payload: []byte("p")}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			errs[c] = be.Publish(ctx, topic, msgs)
		})
	}
	wg.Wait()
	for c, err := range errs {
		require.NoError(t, err, "caller %d: every message of the call was stored", c)
	}
	sub, err := be.Subscribe(context.Background(), topic, subCfg(backend.StartOldest, 100))
	require.NoError(t, err)
	defer sub.Close()
	got := receiveN(t, sub, 1+callers*perCall)
	seen := map[string]int{}
	for _, m := range got {
		seen[m.ID]++
	}
	for c := range callers {
		for i := range perCall {
			assert.Equal(t, 1, seen[fmt.Sprintf("c%d-%d", c, i)], "message c%d-%d is stored once", c, i)
		}
	}
}

// TestPublishOnAFullWindowEndsByTheDeadline fills the window with
// messages whose acks take seconds: a Publish that has to wait for a
// slot returns by its ctx deadline, naming the messages it could not
// publish, rather than after the library's or the backend's own waits.
func TestPublishOnAFullWindowEndsByTheDeadline(t *testing.T) {
	const topic = "window.deadline"
	be := slowLink(t, topic, 1, 2*time.Second)
	msgs := []*backend.Message{{ID: "a", Payload: []byte("a")}, {ID: "b", Payload: []byte("b")}, {ID: "c", Payload: []byte("c")}}
	const deadline = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	start := time.Now()
	err := be.Publish(ctx, topic, msgs)
	elapsed := time.Since(start)
	require.Error(t, err, "no ack can arrive before the deadline")
	var bErr *backend.BatchError
	require.ErrorAs(t, err, &bErr, "the failed messages are named")
	assert.Len(t, bErr.Failed, len(msgs), "no message is known to be stored")
	assert.Less(t, elapsed, deadline+time.Second, "Publish returns by its deadline (plus scheduling slack), not after the 4s round trip")
}

// eachReports publishes msgs with PublishEach and returns each message's
// reports, checking that none comes after PublishEach returned.
func eachReports(t *testing.T, be *busnats.Backend, ctx context.Context, topic string, msgs []*backend.Message) ([][]error, error) {
	t.Helper()
	var mu sync.Mutex
	reports := make([][]error, len(msgs))
	returned := false
	err := be.PublishEach(ctx, topic, msgs, func(i int, err error) {
		mu.Lock()
		defer mu.Unlock()
		assert.False(t, returned, "message %d reported after PublishEach returned", i)
		reports[i] = append(reports[i], err)
	})
	mu.Lock()
	returned = true
	mu.Unlock()
	return reports, err
}

func TestPublishEachReportsEveryMessageOnce(t *testing.T) {
	srv := natstest.Start(t)
	be := connect(t, srv.URL(), busnats.Options{})
	t.Cleanup(func() { _ = be.Close() })
	msgs := make([]*backend.Message, 50)
	for i := range msgs {
		msgs[i] = &backend.Message{ID: fmt.Sprintf("each-%d", i), Key: fmt.Sprintf("k%d", i%3), Payload: []byte("p")}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	reports, err := eachReports(t, be, ctx, "each.ok", msgs)
	require.NoError(t, err, "PublishEach")
	for i, r := range reports {
		require.Equal(t, []error{nil}, r, "message %d is reported stored, once", i)
	}
}

func TestPublishEachReportsUnansweredMessagesWithTheCtxError(t *testing.T) {
	const topic = "each.slow"
	be := slowLink(t, topic, 100, 300*time.Millisecond)
	msgs := make([]*backend.Message, 5)
	for i := range msgs {
		msgs[i] = &backend.Message{ID: fmt.Sprintf("slow-%d", i), Payload: []byte("p")}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	reports, err := eachReports(t, be, ctx, topic, msgs)
	require.NoError(t, err, "PublishEach reports the failures one by one")
	assert.Less(t, time.Since(start), 2*time.Second, "PublishEach returns by its ctx's deadline")
	for i, r := range reports {
		require.Len(t, r, 1, "message %d is reported once", i)
		require.ErrorIs(t, r[0], context.DeadlineExceeded, "message %d, unanswered, fails with the ctx's error", i)
	}
	reports, err = eachReports(t, be, ctx, topic, msgs)
	require.NoError(t, err, "PublishEach with a ctx that ended")
	for i, r := range reports {
		require.Len(t, r, 1, "message %d is reported once", i)
		require.ErrorIs(t, r[0], context.DeadlineExceeded, "message %d is not sent once the ctx ended", i)
	}
}

func TestPublishEachAfterCloseFailsWithErrClosed(t *testing.T) {
	srv := natstest.Start(t)
	be := connect(t, srv.URL(), busnats.Options{})
	require.NoError(t, be.Close())
	called := false
	err := be.PublishEach(context.Background(), "each.closed", []*backend.Message{{ID: "x", Payload: []byte("p")}}, func(int, error) { called = true })
	require.ErrorIs(t, err, backend.ErrClosed, "PublishEach after Close")
	assert.False(t, called, "no message is reported when the whole batch fails")
}
