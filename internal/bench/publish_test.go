package bench

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	bus "github.com/eventbus-go/bus"
)

// busPublishBatches publishes n messages carrying data to topic through the
// bus, batch at a time, reusing the message structs like a tuned producer.
func busPublishBatches(tb testing.TB, bs *bus.Bus, topic string, n, batch int, data []byte) {
	// A ctx that can be cancelled but has no deadline, like a request's:
	// the common case, and on Redis the one that once cost a goroutine
	// per call.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ptrs := make([]*bus.Message, batch)
	msgs := make([]bus.Message, batch)
	for sent := 0; sent < n; {
		k := min(batch, n-sent)
		for i := range k {
			msgs[i] = bus.Message{Payload: data}
			ptrs[i] = &msgs[i]
		}
		if err := bs.Publish(ctx, topic, ptrs[:k]...); err != nil {
			tb.Fatalf("bus publish: %v", err)
		}
		sent += k
	}
}

// benchPayload returns size bytes counting up from 0, so a payload mixes
// every byte value.
func benchPayload(size int) []byte {
	p := make([]byte, size)
	for i := range p {
		p[i] = byte(i)
	}
	return p
}

// fanOut calls each(i) for every i in [0, n), each once, from callers
// goroutines, as request handlers publishing one message each would. It
// returns the first error; every goroutine stops at it.
func fanOut(n, callers int, each func(i int64) error) error {
	var (
		next  atomic.Int64
		wg    sync.WaitGroup
		first atomic.Pointer[error]
	)
	for range callers {
		wg.Go(func() {
			for first.Load() == nil {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				if err := each(i); err != nil {
					first.CompareAndSwap(nil, &err)
					return
				}
			}
		})
	}
	wg.Wait()
	if p := first.Load(); p != nil {
		return *p
	}
	return nil
}
