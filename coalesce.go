package bus

import (
	"fmt"

	"github.com/eventbus-go/bus/internal/coalesce"
)

// Defaults of PublishBatching.
const (
	defaultPublishBatchMessages = 1000
	defaultPublishBatchBytes    = 4 << 20
	defaultPublishBatches       = 2
	defaultPublishWindow        = 1000
)

// PublishBatching says how the bus combines concurrent Publish calls to
// one topic into backend batches. A call that finds fewer than MaxBatches
// batches of its topic in flight goes to the backend at once, on the
// caller's goroutine and with the caller's ctx, so light load sees no
// added latency. Calls that find the topic busy wait, and as soon as a
// batch returns the waiting calls are sent together as one backend batch,
// bounded by MaxMessages and MaxBytes. Each call still gets its own
// result: validation happens per call before anything is combined, and a
// message that fails is reported to its own caller only. One call's
// messages are never split over batches, so a call with more messages
// than the bounds goes alone.
//
// MaxMessages and MaxBytes also bound the batches of PublishAsync, whose
// messages wait in a window of their own and are not combined with
// Publish calls (see Window and PublishAsync).
//
// Zero fields take their defaults: 1,000 messages, 4 MiB, 2 batches in
// flight and a window of 1,000 messages.
type PublishBatching struct {
	// MaxMessages bounds the messages of one combined batch.
	MaxMessages int
	// MaxBytes bounds the payload, key, ID and header bytes of one
	// combined batch.
	MaxBytes int
	// MaxBatches bounds the backend batches of one topic in flight at
	// once. Calls beyond it wait and are combined.
	MaxBatches int
	// Disabled sends every call straight to the backend, however many
	// are in flight; nothing is combined.
	Disabled bool
	// Window bounds the PublishAsync messages of the Bus whose results
	// are not known yet, over all topics: a PublishAsync that finds it
	// full waits for room (within its ctx). The messages in it are the
	// bus's copies, so it also bounds their memory (at most Window times
	// the max payload and headers).
	Window int
}

// WithPublishBatching sets how concurrent Publish calls to one topic are
// combined (see PublishBatching). Negative values are invalid.
func WithPublishBatching(pb PublishBatching) Option {
	return busOptionFunc(func(b *busOptions) error {
		if pb.MaxMessages < 0 || pb.MaxBytes < 0 || pb.MaxBatches < 0 || pb.Window < 0 {
			return fmt.Errorf("%w: publish batching %+v, want no negative bound", ErrInvalidOption, pb)
		}
		b.batching = pb
		return nil
	})
}

// config is pb with its defaults, for the coalescer.
func (pb PublishBatching) config() coalesce.Config {
	if pb.MaxMessages == 0 {
		pb.MaxMessages = defaultPublishBatchMessages
	}
	if pb.MaxBytes == 0 {
		pb.MaxBytes = defaultPublishBatchBytes
	}
	if pb.MaxBatches == 0 {
		pb.MaxBatches = defaultPublishBatches
	}
	return coalesce.Config{MaxMessages: pb.MaxMessages, MaxBytes: pb.MaxBytes, MaxBatches: pb.MaxBatches, Disabled: pb.Disabled}
}

// window is the PublishAsync window of pb, with its default.
func (pb PublishBatching) window() int {
	if pb.Window == 0 {
		return defaultPublishWindow
	}
	return pb.Window
}
