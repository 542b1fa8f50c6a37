// Package benchload holds the load the Go benchmarks of the bus put on
// it, shared by internal/bench (mem:// against a Go channel, the portable
// layer) and internal/bench/brokers (the bus on Redis, NATS and
// PostgreSQL against their raw clients), so both publish the same way.
package benchload

import (
	"context"
	"encoding/binary"
	"testing"

	bus "github.com/eventbus-go/bus"
)

// PublishBatches publishes n messages to topic through the bus, batch at a
// time, reusing the message structs and payload buffers like a tuned
// producer. Each payload is a copy of data with the message's number (0 to
// n-1) in its first eight bytes, when it has that many. Safe to call off
// the benchmark's goroutine: it returns the first error.
func PublishBatches(bs *bus.Bus, topic string, n, batch int, data []byte) error {
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

// Payload returns size bytes counting up from 0, so a payload mixes
// every byte value.
func Payload(size int) []byte {
	p := make([]byte, size)
	for i := range p {
		p[i] = byte(i)
	}
	return p
}

// OpenBus opens a bus on url, closed when the benchmark ends.
func OpenBus(tb testing.TB, url string) *bus.Bus {
	tb.Helper()
	ctx := context.Background()
	bs, err := bus.Open(ctx, url)
	if err != nil {
		tb.Fatalf("open %s: %v", url, err)
	}
	tb.Cleanup(func() {
		if err := bs.Close(ctx); err != nil {
			tb.Errorf("close bus: %v", err)
		}
	})
	return bs
}
