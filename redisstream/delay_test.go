package redisstream_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/testkit/redistest"
	"github.com/eventbus-go/bus/observer"
)

// delayLateBound is how late a redelivery may come in the delay tests: far
// above what a loaded machine adds, far below the second a redelivery
// waited when it came with the periodic reclaim scan.
const delayLateBound = 400 * time.Millisecond

// gapRecorder records, per message, when each delivery started and when
// its handler gave the delivery back.
type gapRecorder struct {
	mu      sync.Mutex
	started []time.Time
	gaveUp  []time.Time
	done    chan struct{}
	want    int
}

func newGapRecorder(deliveries int) *gapRecorder {
	return &gapRecorder{done: make(chan struct{}), want: deliveries}
}

// start records a delivery's start and reports whether it is the last one
// the test wants (which the handler then settles for good).
func (g *gapRecorder) start() (last bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.started = append(g.started, time.Now())
	return len(g.started) >= g.want
}

// gaveBack records that the handler is about to give the delivery back.
func (g *gapRecorder) gaveBack() {
	g.mu.Lock()
	g.gaveUp = append(g.gaveUp, time.Now())
	g.mu.Unlock()
}

func (g *gapRecorder) finish() { close(g.done) }

// gaps returns, per redelivery, the time from the give-back to the next
// delivery's start.
func (g *gapRecorder) gaps() []time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []time.Duration
	for i := 1; i < len(g.started) && i <= len(g.gaveUp); i++ {
		out = append(out, g.started[i].Sub(g.gaveUp[i-1]))
	}
	return out
}

// TestDelaysHonouredOnEveryAttempt: a constant retry backoff, bus.Nack,
// Nack with a delay (also one longer than the ack timeout) and Snooze
// each bring the message back no earlier than the delay after the handler
// gave it back, and well within a second after it, on every one of five
// redeliveries, not only the first.
func TestDelaysHonouredOnEveryAttempt(t *testing.T) {
	b, _, _ := openBus(t, redistest.URL(t), nil, bus.WithObserver(observer.Nop()))
	const delay = 300 * time.Millisecond
	const redeliveries = 5
	errFail := errors.New("fail")
	tests := []struct {
		name string
		opts []bus.SubscribeOption
		// giveBack gives the delivery back for a redelivery after delay.
		giveBack func(ctx context.Context, d *bus.Delivery) error
	}{
		{
			name: "backoff",
			opts: []bus.SubscribeOption{
				bus.WithRetryBackoff(func() backoff.BackOff { return backoff.NewConstantBackOff(delay) }),
				bus.WithMaxDeliveries(redeliveries + 2),
			},
			giveBack: func(context.Context, *bus.Delivery) error { return errFail },
		},
		{
			name:     "retry-after",
			opts:     []bus.SubscribeOption{bus.WithMaxDeliveries(redeliveries + 2)},
			giveBack: func(context.Context, *bus.Delivery) error { return bus.Nack(errFail, delay) },
		},
		{
			name: "nack",
			opts: []bus.SubscribeOption{bus.WithAckMode(bus.AckManual), bus.WithMaxDeliveries(redeliveries + 2)},
			giveBack: func(ctx context.Context, d *bus.Delivery) error {
				return d.Nack(ctx, delay)
			},
		},
		{
			name:     "snooze",
			giveBack: func(context.Context, *bus.Delivery) error { return bus.Snooze(delay) },
		},
		{
			// A delay past the ack timeout is held (hold ZSET) and
			// made claimable by the promoter.
			name: "nack-held",
			opts: []bus.SubscribeOption{bus.WithAckMode(bus.AckManual), bus.WithMaxDeliveries(redeliveries + 2),
				bus.WithAckTimeout(200 * time.Millisecond)},
			giveBack: func(ctx context.Context, d *bus.Delivery) error {
				return d.Nack(ctx, delay)
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			topic := uniqueTopic(t)
			rec := newGapRecorder(redeliveries + 1)
			opts := append([]bus.SubscribeOption{bus.WithGroup("g"), bus.WithAckTimeout(30 * time.Second)}, tt.opts...)
			sub, err := b.Subscribe(ctx, topic, func(ctx context.Context, d *bus.Delivery) error {
				if rec.start() {
					defer rec.finish()
					return d.Ack(ctx)
				}
				rec.gaveBack()
				return tt.giveBack(ctx, d)
			}, opts...)
			require.NoError(t, err)
			defer sub.Close(ctx)
			require.NoError(t, b.Publish(ctx, topic, &bus.Message{Payload: []byte("again")}))
			select {
			case <-rec.done:
			case <-time.After(redeliveries * (delay + 2*time.Second)):
				t.Fatalf("%d redeliveries did not come in time; gaps so far %v", redeliveries, rec.gaps())
			}
			gaps := rec.gaps()
			t.Logf("%s of %v, %d times: gaps %v", tt.name, delay, redeliveries, gaps)
			require.Len(t, gaps, redeliveries)
			for i, g := range gaps {
				assert.GreaterOrEqual(t, g, delay, "redelivery %d came %v after the give-back, before its delay of %v", i+1, g, delay)
				assert.Less(t, g, delay+delayLateBound, "redelivery %d came %v after the give-back, more than %v late", i+1, g, delayLateBound)
			}
		})
	}
}
