package middleware

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/eventbus-go/bus"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testBus opens an inmemory bus closed at the end of the test.
func testBus(t *testing.T, opts ...bus.Option) *bus.Bus {
	t.Helper()
	// Deduplication at publish is off, so that tests of consumer-side
	// deduplication can publish an ID twice.
	b, err := bus.Open(context.Background(), "mem://?dedup_window=0", opts...)
	require.NoError(t, err, "open inmemory bus")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, b.Close(ctx), "close bus")
	})
	return b
}

// settlement is one settled delivery.
type settlement struct {
	id      string
	attempt int
	outcome bus.Outcome
}

// recordOutcomes returns middleware, to install outermost, that sends the
// settlement of each delivery to the returned channel.
func recordOutcomes() (bus.Middleware, <-chan settlement) {
	ch := make(chan settlement, 100)
	return func(next bus.Handler) bus.Handler {
		return func(ctx context.Context, d *bus.Delivery) error {
			id, attempt := d.ID, d.Attempt
			d.OnSettle(func(o bus.Outcome, _ error) { ch <- settlement{id, attempt, o} })
			return next(ctx, d)
		}
	}, ch
}

// nextSettlement waits for the next settlement.
func nextSettlement(t *testing.T, ch <-chan settlement) settlement {
	t.Helper()
	select {
	case s := <-ch:
		return s
	case <-time.After(5 * time.Second):
		t.Fatal("no delivery was settled within 5s")
		return settlement{}
	}
}

// noSettlement asserts that nothing is settled for a short while.
func noSettlement(t *testing.T, ch <-chan settlement, within time.Duration) {
	t.Helper()
	select {
	case s := <-ch:
		t.Fatalf("unexpected settlement %+v", s)
	case <-time.After(within):
	}
}

// subscribe subscribes h with opts and returns when the subscription runs.
func subscribe(t *testing.T, b *bus.Bus, topic string, h bus.Handler, opts ...bus.SubscribeOption) {
	t.Helper()
	_, err := b.Subscribe(context.Background(), topic, h, opts...)
	require.NoError(t, err, "subscribe %q", topic)
}

func publish(t *testing.T, b *bus.Bus, topic string, msgs ...*bus.Message) {
	t.Helper()
	require.NoError(t, b.Publish(context.Background(), topic, msgs...), "publish to %q", topic)
}

// counter counts handler calls.
type counter struct {
	mu sync.Mutex
	n  int
}

func (c *counter) inc() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	return c.n
}

func (c *counter) get() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

var errBoom = errors.New("boom")
