package bench

import (
	"context"
	"testing"

	bus "github.com/eventbus-go/bus"
)

// busPublishBatches publishes n messages carrying data to topic through the
// bus, batch at a time, reusing the message structs like a tuned producer.
func busPublishBatches(tb testing.TB, bs *bus.Bus, topic string, n, batch int, data []byte) {
	ctx := context.Background()
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
