package bus_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/eventbus-go/bus"
)

// One concurrency limiter shared by two subscriptions caps the handlers of
// both together: here at most two run at once across "emails" and "sms".
// Capacity is taken before the backend is asked for messages, so a
// saturated process fetches nothing it cannot start.
func ExampleNewConcurrencyLimiter() {
	ctx := context.Background()
	b, err := bus.Open(ctx, "mem://")
	if err != nil {
		panic(err)
	}
	defer b.Close(ctx)

	shared := bus.NewConcurrencyLimiter(2)
	var running, peak atomic.Int32
	var wg sync.WaitGroup
	wg.Add(20)
	h := func(ctx context.Context, d *bus.Delivery) error {
		defer wg.Done()
		n := running.Add(1)
		defer running.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		return nil
	}
	for _, topic := range []string{"emails", "sms"} {
		if _, err := b.Subscribe(ctx, topic, h, bus.WithLimiter(shared)); err != nil {
			panic(err)
		}
	}
	for i := range 10 {
		for _, topic := range []string{"emails", "sms"} {
			if err := b.Publish(ctx, topic, &bus.Message{Payload: fmt.Appendf(nil, "%d", i)}); err != nil {
				panic(err)
			}
		}
	}
	wg.Wait()
	fmt.Println("handled 20, never more than 2 at once:", peak.Load() <= 2)
	// Output: handled 20, never more than 2 at once: true
}
