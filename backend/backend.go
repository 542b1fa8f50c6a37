package backend

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/eventbus-go/bus/observer"
)

// Message is one message as it crosses the SPI. On Publish, ID, Key,
// Headers and Payload are set by the bus and PublishedAt is the time the
// bus accepted the message. On Receive the backend fills every field,
// including AckID and Attempt.
type Message struct {
	ID          string
	Key         string
	Headers     map[string]string
	Payload     []byte
	PublishedAt time.Time

	// AckID identifies this delivery to Ack, Nack and the optional
	// interfaces. Its dynamic type is private to the backend.
	AckID AckID
	// Attempt is 1 on the first delivery to the group and grows by one
	// with each redelivery (nack or expired lease).
	Attempt int
}

// AckID is a backend's handle for one delivered message.
type AckID any

// StartFrom says where a new consumer group starts reading.
type StartFrom int

const (
	// StartNewest delivers only messages published after the group was
	// created.
	StartNewest StartFrom = iota
	// StartOldest delivers every message the topic still retains.
	StartOldest
)

// String returns "newest" or "oldest".
func (s StartFrom) String() string {
	switch s {
	case StartNewest:
		return "newest"
	case StartOldest:
		return "oldest"
	default:
		return fmt.Sprintf("StartFrom(%d)", int(s))
	}
}

// SubscribeConfig is what the bus asks of Backend.Subscribe. Every field is
// set and validated by the bus.
type SubscribeConfig struct {
	// Group is the consumer group. Members of one group share the
	// messages; every group gets every message.
	Group string
	// StartFrom applies only when the group is created.
	StartFrom StartFrom
	// AckTimeout is the lease of a received message.
	AckTimeout time.Duration
	// MaxInFlight is the most messages the bus will hold unsettled at once
	// for this subscription. Backends may size server-side windows from it
	// (for example NATS MaxAckPending).
	MaxInFlight int
	// MaxDeliveries is the attempt after which the bus dead-letters a
	// message. Backends may pass it to the broker as a safety net but must
	// not drop messages on their own before it.
	MaxDeliveries int
	// DeadLetterTopic is where malformed entries go. Empty means dead
	// lettering is off: malformed entries are acked and reported.
	DeadLetterTopic string
	// Observer receives the errors the backend handles in the background
	// (reclaim, decode, group re-creation ...). Never nil.
	Observer observer.Observer
}

// Backend is implemented by every bus backend. See the package doc for the
// contract of each method. A Backend must be safe for concurrent use.
type Backend interface {
	Publish(ctx context.Context, topic string, msgs []*Message) error
	Subscribe(ctx context.Context, topic string, cfg SubscribeConfig) (Subscription, error)
	Capabilities() Capabilities
	Close() error
}

// Subscription is one member of a consumer group. See the package doc for
// the contract of each method.
type Subscription interface {
	Receive(ctx context.Context, max int) ([]*Message, error)
	Ack(ctx context.Context, ids []AckID) error
	Nack(ctx context.Context, id AckID, delay time.Duration) error
	Close() error
}

// Extender is implemented by subscriptions that can restart a lease.
type Extender interface {
	Extend(ctx context.Context, id AckID) error
}

// DeadLetterer is implemented by subscriptions that can move a message to
// the dead-letter topic and settle it atomically. msg is the copy to store,
// with the dead-letter headers already added by the bus.
type DeadLetterer interface {
	DeadLetter(ctx context.Context, id AckID, topic string, msg *Message) error
}

// Capabilities describes what a backend guarantees. The zero value is the
// weakest backend: one consumer per topic, nothing persisted, at-most-once.
type Capabilities struct {
	// Name is a short name for messages and metrics, e.g. "redis".
	Name string
	// ConsumerGroups: members of one group share the load and each group
	// gets every message.
	ConsumerGroups bool
	// Persistent: messages survive a restart of the broker or process.
	Persistent bool
	// Redelivery: the backend is at-least-once: a message not acked within
	// its lease, or nacked, is delivered again.
	Redelivery bool
	// NackDelay: the broker holds a nacked message for the requested delay.
	NackDelay bool
	// Ordered: a single consumer receives first deliveries in publish
	// order.
	Ordered bool
	// StartOldest: a new group can start from the oldest retained message.
	StartOldest bool
	// Extend: subscriptions implement Extender.
	Extend bool
	// MaxPayload is the largest payload the backend accepts (0 = no limit
	// of its own). The bus uses the smaller of this and WithMaxPayload.
	MaxPayload int
}

// Failure is one failed message of a batch.
type Failure struct {
	Index int
	Err   error
}

// BatchError is returned by Publish when only some messages of a batch
// failed. Messages not listed were stored.
type BatchError struct {
	Failed []Failure
}

func (e *BatchError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d messages failed", len(e.Failed))
	if len(e.Failed) > 0 {
		fmt.Fprintf(&b, ", first at %d: %v", e.Failed[0].Index, e.Failed[0].Err)
	}
	return b.String()
}

// Unwrap returns the errors of the failed messages.
func (e *BatchError) Unwrap() []error {
	errs := make([]error, len(e.Failed))
	for i, f := range e.Failed {
		errs[i] = f.Err
	}
	return errs
}
