package inmemory_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/inmemory"
	"github.com/eventbus-go/bus/observer"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// newBackend returns a private backend closed when the test ends.
func newBackend(t testing.TB, opts *inmemory.Options) *inmemory.Backend {
	t.Helper()
	be, err := inmemory.New(opts)
	require.NoError(t, err, "New with valid options")
	t.Cleanup(func() { _ = be.Close() })
	return be
}

type subOpt func(*backend.SubscribeConfig)

func oldest(c *backend.SubscribeConfig) { c.StartFrom = backend.StartOldest }

func ackTimeout(d time.Duration) subOpt {
	return func(c *backend.SubscribeConfig) { c.AckTimeout = d }
}

// subscribe joins group on topic (ack timeout 1 minute unless set), closed
// when the test ends.
func subscribe(t testing.TB, be backend.Backend, topic, group string, opts ...subOpt) backend.Subscription {
	t.Helper()
	cfg := backend.SubscribeConfig{Group: group, AckTimeout: time.Minute, MaxInFlight: 64, MaxDeliveries: 10, Observer: observer.Nop()}
	for _, o := range opts {
		o(&cfg)
	}
	s, err := be.Subscribe(context.Background(), topic, cfg)
	require.NoError(t, err, "subscribe %q group %q", topic, group)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// publish publishes n messages with IDs prefix0 .. prefix<n-1> in one
// batch.
func publish(t testing.TB, be backend.Backend, topic, prefix string, n int) {
	t.Helper()
	require.NoError(t, be.Publish(context.Background(), topic, msgs(prefix, n)), "publish %d to %q", n, topic)
}

func msgs(prefix string, n int) []*backend.Message {
	out := make([]*backend.Message, n)
	for i := range out {
		out[i] = &backend.Message{ID: prefix + strconv.Itoa(i), Payload: []byte(fmt.Sprintf("payload %d", i)), PublishedAt: time.Now()}
	}
	return out
}

// receiveN receives until it has n messages or the deadline passes.
func receiveN(t testing.TB, s backend.Subscription, n int, within time.Duration) []*backend.Message {
	t.Helper()
	var got []*backend.Message
	deadline := time.Now().Add(within)
	for len(got) < n && time.Now().Before(deadline) {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		m, err := s.Receive(ctx, n-len(got))
		cancel()
		if err != nil {
			require.ErrorIs(t, err, context.DeadlineExceeded, "receive")
			break
		}
		got = append(got, copyMessages(m)...)
	}
	require.Len(t, got, n, "messages received within %v", within)
	return got
}

// copyMessages copies received messages: a Receive may reuse them.
func copyMessages(ms []*backend.Message) []*backend.Message {
	out := make([]*backend.Message, len(ms))
	for i, m := range ms {
		cp := *m
		out[i] = &cp
	}
	return out
}

// receiveNone asserts that nothing arrives within d.
func receiveNone(t testing.TB, s backend.Subscription, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for {
		m, err := s.Receive(ctx, 100)
		require.Empty(t, m, "no message expected within %v", d)
		if err != nil {
			require.ErrorIs(t, err, context.DeadlineExceeded)
			return
		}
	}
}

func ids(ms []*backend.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

var ackAll = inmemory.AckAll

func seq(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + strconv.Itoa(i)
	}
	return out
}
