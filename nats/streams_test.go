package nats_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/testkit/natstest"
	busnats "github.com/eventbus-go/bus/nats"
)

// TestPrefixesNeverShareAStream: two buses with different subject prefixes
// on one server each get their own streams, and each consumes only its own
// messages.
func TestPrefixesNeverShareAStream(t *testing.T) {
	url := natstest.Start(t).URL()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	open := func(prefix string) *bus.Bus {
		be := connect(t, url, busnats.Options{SubjectPrefix: prefix})
		b := bus.New(be)
		t.Cleanup(func() { _ = b.Close(context.Background()) })
		return b
	}
	for _, mode := range []string{"per-topic", "shared"} {
		t.Run(mode, func(t *testing.T) {
			a, b := open("team-a."+mode), open("team-b."+mode)
			got := map[string]chan string{"a": make(chan string, 4), "b": make(chan string, 4)}
			for name, bb := range map[string]*bus.Bus{"a": a, "b": b} {
				ch := got[name]
				_, err := bb.Subscribe(ctx, "orders", func(_ context.Context, d *bus.Delivery) error {
					ch <- string(d.Payload)
					return nil
				}, bus.WithStartFrom(backend.StartOldest))
				require.NoError(t, err, "subscribe %s", name)
			}
			require.NoError(t, a.Publish(ctx, "orders", &bus.Message{Payload: []byte("from a")}), "bus a publishes")
			require.NoError(t, b.Publish(ctx, "orders", &bus.Message{Payload: []byte("from b")}), "bus b publishes")
			for name, want := range map[string]string{"a": "from a", "b": "from b"} {
				select {
				case p := <-got[name]:
					assert.Equal(t, want, p, "bus %s gets its own message only", name)
				case <-ctx.Done():
					t.Fatalf("bus %s got nothing", name)
				}
			}
		})
	}
}

// TestStreamWithOtherSubjectsIsAClearError: a stream that exists under the
// bus's stream name but for other subjects is refused at Publish and
// Subscribe with an error that says so (and is permanent), never a silent
// wait.
func TestStreamWithOtherSubjectsIsAClearError(t *testing.T) {
	srv := natstest.Start(t)
	be := connect(t, srv.URL(), busnats.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, err := jetstream.New(be.Conn())
	require.NoError(t, err)
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "BUS_orders", Subjects: []string{"elsewhere.orders"}})
	require.NoError(t, err)
	b := bus.New(be)
	defer b.Close(ctx)
	err = b.Publish(ctx, "orders", &bus.Message{Payload: []byte("x")})
	require.Error(t, err, "publish into a stream of other subjects")
	assert.Contains(t, err.Error(), "exists for subjects")
	assert.True(t, backend.IsPermanent(err), "no retry fixes it")
	_, err = b.Subscribe(ctx, "orders", func(context.Context, *bus.Delivery) error { return nil })
	require.Error(t, err, "subscribe to a stream of other subjects")
	assert.Contains(t, err.Error(), "exists for subjects")
}
