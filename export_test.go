package bus

import "github.com/eventbus-go/bus/backend"

// BackendMessage lets external tests name the SPI message type briefly.
type BackendMessage = backend.Message

// PendingPublishes returns how many Publish calls to topic wait behind
// the batches in flight.
func PendingPublishes(b *Bus, topic string) int { return b.batcher.Pending(topic) }

// PublishTopicsKept returns how many topics the publish batching keeps
// state for.
func PublishTopicsKept(b *Bus) int { return b.batcher.TopicsKept() }
