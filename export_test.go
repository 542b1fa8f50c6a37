package bus

import (
	"fmt"
	"time"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/msgcheck"
)

// BackendMessage lets external tests name the SPI message type briefly.
type BackendMessage = backend.Message

// PendingPublishes returns how many Publish calls to topic wait behind
// the batches in flight.
func PendingPublishes(b *Bus, topic string) int { return b.batcher.Pending(topic) }

// PublishTopicsKept returns how many topics the publish batching keeps
// state for.
func PublishTopicsKept(b *Bus) int { return b.batcher.TopicsKept() }

// WithAckBatch sets how acks are batched, for tests that need acks to
// flush at once or only on close: at most size ids per backend call and at
// most interval between a settlement and its flush (defaults 256 and 5ms).
func WithAckBatch(size int, interval time.Duration) Option {
	return busOptionFunc(func(b *busOptions) error {
		if size < 1 || interval <= 0 {
			return fmt.Errorf("%w: ack batch size %d interval %v, want size >= 1 and interval > 0", ErrInvalidOption, size, interval)
		}
		b.ackBatch, b.ackInterval = size, interval
		return nil
	})
}

// VisibleASCII is the word-at-a-time check of message IDs.
var VisibleASCII = msgcheck.VisibleASCII
