package bench

import (
	"context"
	"encoding/binary"
	"sync"
	"sync/atomic"
	"testing"

	bus "github.com/eventbus-go/bus"
)

// busPublishBatches is publishBatches that fails the benchmark on an error.
func busPublishBatches(tb testing.TB, bs *bus.Bus, topic string, n, batch int, data []byte) {
	if err := publishBatches(bs, topic, n, batch, data); err != nil {
		tb.Fatalf("bus publish: %v", err)
	}
}

// publishBatches publishes n messages to topic through the bus, batch at a
// time, reusing the message structs and payload buffers like a tuned
// producer. Each payload is a copy of data with the message's number (0 to
// n-1) in its first eight bytes, when it has that many. Safe to call off
// the benchmark's goroutine: it returns the first error.
func publishBatches(bs *bus.Bus, topic string, n, batch int, data []byte) error {
	// A ctx that can be cancelled but has no deadline, like a request's:
	// the common case, and on Redis the one that once cost a goroutine
	// per call.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	buf := make([]byte, batch*len(data))
	msgs := make([]bus.Message, batch)
	ptrs := make([]*bus.Message, batch)
	for i := range msgs {
		p := buf[i*len(data) : (i+1)*len(data)]
		copy(p, data)
		msgs[i].Payload = p
		ptrs[i] = &msgs[i]
	}
	for seq := 0; seq < n; seq += batch {
		k := min(batch, n-seq)
		for i := range k {
			p := msgs[i].Payload
			msgs[i] = bus.Message{Payload: p} // what the last Publish set (the ID) goes
			if len(p) >= 8 {
				binary.LittleEndian.PutUint64(p, uint64(seq+i))
			}
		}
		if err := bs.Publish(ctx, topic, ptrs[:k]...); err != nil {
			return err
		}
	}
	return nil
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
