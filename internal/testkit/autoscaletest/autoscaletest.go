// Package autoscaletest holds the scenario every backend runs to show
// bus.WithAutoscale at work: a backlog that grows scales the in-flight
// bound up to its maximum, and once it is drained, back down to its
// minimum.
package autoscaletest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/autoscale"
	"github.com/eventbus-go/bus/observer"
)

// Recorder is an observer that keeps the scaling decisions.
type Recorder struct {
	mu     sync.Mutex
	scales []observer.Scale
}

// Observe implements observer.Observer.
func (r *Recorder) Observe(_ context.Context, e observer.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e.Scale != nil {
		r.scales = append(r.scales, *e.Scale)
	}
}

// Scales returns the decisions so far.
func (r *Recorder) Scales() []observer.Scale {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.scales)
}

// bound is the bound after the last decision (start when there was none).
func (r *Recorder) bound(start int) int {
	s := r.Scales()
	if len(s) == 0 {
		return start
	}
	return s[len(s)-1].To
}

// Scenario bounds.
const (
	minBound = 1
	maxBound = 8
	// work is a handler's I/O-bound time: at maxBound the subscription
	// handles about 1600 messages a second, fewer than Run publishes.
	work = 5 * time.Millisecond
	// tick is the controller's tick during the scenario.
	tick = 10 * time.Millisecond
)

// Run subscribes to topic on b (whose observer must include rec) with
// WithAutoscale(1, 8), publishes faster than 8 handlers keep up with until
// the bound reaches 8, then stops publishing and requires the bound to
// come back to 1 once the backlog is drained, and every message to be
// handled. It takes a few seconds.
func Run(t *testing.T, b *bus.Bus, rec *Recorder, topic string) {
	defer time.AfterFunc(time.Minute, func() { panic("watchdog: " + t.Name() + " still running after 1m") }).Stop()
	defer autoscale.SetTickForTest(tick)()
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	var handled atomic.Int64
	sub, err := b.Subscribe(ctx, topic, func(context.Context, *bus.Delivery) error {
		time.Sleep(work) // stands for I/O
		handled.Add(1)
		return nil
	}, bus.WithAutoscale(minBound, maxBound), bus.WithGroup("scaled"))
	require.NoError(t, err, "subscribe with autoscale")
	defer func() { require.NoError(t, sub.Close(ctx), "close the subscription") }()

	stop := make(chan struct{})
	published := make(chan int, 1)
	go func() { published <- publishUntil(ctx, t, b, topic, stop) }()
	require.Eventually(t, func() bool { return rec.bound(minBound) == maxBound }, 20*time.Second, tick,
		"a growing backlog scales the bound up to %d; decisions: %v", maxBound, rec.Scales())
	close(stop)
	n := <-published
	require.Eventually(t, func() bool { return handled.Load() >= int64(n) && rec.bound(minBound) == minBound }, 20*time.Second, tick,
		"the drained backlog scales the bound back to %d (handled %d of %d); decisions: %v", minBound, handled.Load(), n, rec.Scales())
	t.Logf("decisions: %v", rec.Scales())
	checkReasons(t, rec.Scales())
}

// publishUntil publishes batches of 10 messages every 2 ms (about 5000 a
// second) until stop is closed, and returns how many it published.
func publishUntil(ctx context.Context, t *testing.T, b *bus.Bus, topic string, stop <-chan struct{}) int {
	tk := time.NewTicker(2 * time.Millisecond)
	defer tk.Stop()
	n := 0
	for {
		select {
		case <-stop:
			return n
		case <-ctx.Done():
			return n
		case <-tk.C:
		}
		msgs := make([]*bus.Message, 10)
		for i := range msgs {
			msgs[i] = &bus.Message{Payload: fmt.Appendf(nil, "m%d", n+i)}
		}
		if err := b.Publish(ctx, topic, msgs...); err != nil {
			t.Errorf("publish: %v", err)
			return n
		}
		n += len(msgs)
	}
}

// checkReasons requires the bound to have grown for the backlog only and
// to have shrunk last because the backlog was drained.
func checkReasons(t *testing.T, scales []observer.Scale) {
	require.NotEmpty(t, scales, "decisions were reported")
	for _, s := range scales {
		if s.To > s.From {
			require.Equal(t, autoscale.ReasonBacklog, s.Reason, "the bound grows for the backlog: %v", s)
		}
	}
	last := scales[len(scales)-1]
	require.Equal(t, autoscale.ReasonDrained, last.Reason, "the last decision follows the drained backlog: %v", last)
}
