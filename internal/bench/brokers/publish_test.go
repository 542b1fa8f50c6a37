package brokers

import (
	"sync"
	"sync/atomic"
	"testing"

	bus "github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/testkit/benchload"
)

// busPublishBatches is benchload.PublishBatches that fails the benchmark
// on an error.
func busPublishBatches(tb testing.TB, bs *bus.Bus, topic string, n, batch int, data []byte) {
	if err := benchload.PublishBatches(bs, topic, n, batch, data); err != nil {
		tb.Fatalf("bus publish: %v", err)
	}
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
