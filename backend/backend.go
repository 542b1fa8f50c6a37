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
	// IDGenerated is set on Publish when the bus generated ID in this
	// call because the caller left it empty. Such an ID is unique by
	// construction, so a backend that deduplicates by message ID may
	// store the message without recording or looking up its ID. An ID the
	// caller set (IDGenerated false) is stored once within the backend's
	// dedup window: a caller that retries a Publish sets the ID itself.
	// Unset on Receive.
	IDGenerated bool

	// AckID identifies this delivery to Ack, Nack and the optional
	// interfaces. Its dynamic type is private to the backend.
	AckID AckID
	// Attempt is 1 on the first delivery to the group and grows by one
	// with each redelivery (nack or a lease that ran out).
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

// Backend is implemented by every bus backend. A Backend must be safe for
// concurrent use. The bus has validated every argument before it calls a
// method (topics, message content and sizes, SubscribeConfig), so a
// backend checks only what is its own.
type Backend interface {
	// Publish stores every message of the batch durably (as far as
	// Capabilities say it is durable) before it returns nil. The bus has
	// assigned IDs and checked the content rule, so every message it
	// passes can be carried byte-exact: a backend whose wire would alter
	// a value (ID, key, header keys and values, payload) encodes it.
	// The slice and the messages belong to the caller after Publish
	// returns (the bus reuses them); a backend that keeps them must copy
	// them, buffers included. When only part of a batch fails, Publish
	// returns a *BatchError listing the failed indexes; the other messages
	// were stored. Publish must not retry, must return by ctx's deadline
	// (also on a dead network) and, after Close, returns an error wrapping
	// ErrClosed. Publish is called concurrently.
	Publish(ctx context.Context, topic string, msgs []*Message) error

	// Subscribe creates (or joins) the consumer group cfg.Group on topic
	// and returns a member of it. A new group starts at cfg.StartFrom; an
	// existing group resumes where it stands. ctx bounds only the setup
	// I/O, never the life of the subscription. An error that no retry can
	// fix (a permission, a stream configured for other subjects) should
	// be wrapped with Permanent. Subscribe is called concurrently.
	Subscribe(ctx context.Context, topic string, cfg SubscribeConfig) (Subscription, error)

	// Capabilities describes what the backend guarantees. It is constant
	// for the life of the Backend and must agree with the optional
	// interfaces its subscriptions implement (Extend with Extender); the
	// conformance suite checks that. The bus validates subscribe options
	// against it and the suite chooses its cases from it.
	Capabilities() Capabilities

	// Close releases the backend's resources. The bus calls it once, after
	// every subscription was closed, but Close must also end subscriptions
	// still open: their Receive returns an error wrapping ErrClosed
	// promptly. It returns within a short, documented bound even on a dead
	// network. Calls after Close return errors wrapping ErrClosed.
	Close() error
}

// Subscription is one member of a consumer group. Receive is called from
// one goroutine at a time; Ack, Nack, Close and the optional methods may
// be called concurrently with each other and with Receive.
type Subscription interface {
	// Receive returns at most max messages (max >= 1). It blocks for at
	// most about one second and may return no message and a nil error;
	// the bus calls it again. It returns promptly with ctx.Err() when ctx
	// ends, and with an error wrapping ErrClosed after Close (of the
	// subscription or of the Backend). A backend never holds received
	// messages locally beyond max: the bus reserved exactly max units of
	// capacity before the call, which is how backpressure reaches the
	// broker. Every returned message starts a lease of cfg.AckTimeout; if
	// it is not settled within the lease it is delivered again (to any
	// member) with Attempt+1. Malformed entries written by foreign
	// producers are never returned: the backend dead-letters them (with
	// NewDeadLetter, to cfg.DeadLetterTopic when set), settles them and
	// reports them with observer.ScopeDecode, naming the entry and the
	// problem but never quoting wire content. An error no retry can fix is
	// wrapped with Permanent; the bus then ends the subscription, while
	// other errors are retried with backoff. The returned slice and
	// Message structs stay valid until the next Receive (the backend may
	// reuse them then); AckIDs stay valid until settled.
	Receive(ctx context.Context, max int) ([]*Message, error)

	// Ack settles the messages for the group. It is idempotent: an id
	// already acked is skipped. An id whose lease ran out (the message may
	// have been delivered again since) still settles the message if the
	// group has not settled it since, together with its newer delivery,
	// and is never an error. The bus batches acks and bounds the flush of
	// a closing subscription by the Close ctx.
	Ack(ctx context.Context, ids []AckID) error

	// Nack makes the message available to the group again after delay (0
	// = at once), with Attempt+1. A backend without NackDelay may
	// redeliver earlier than delay but never loses the message; Nack is
	// atomic, so a crash leaves the message pending or scheduled, never
	// lost. A stale id (its lease ended, or it was settled) returns an
	// error wrapping ErrStale and never touches a newer delivery. The bus
	// passes a delay of 0 to MaxDelay.
	Nack(ctx context.Context, id AckID, delay time.Duration) error

	// Close stops the member. A Receive in progress returns promptly with
	// an error wrapping ErrClosed, and so does every later Receive.
	// Unsettled messages stay pending and are delivered again after their
	// lease. Close returns within a short, documented bound even on a
	// dead network; closing twice returns nil.
	Close() error
}

// Extender is implemented by subscriptions that can restart a lease. The
// bus uses it for Delivery.Extend and to keep the lease of a running
// handler alive.
type Extender interface {
	// Extend restarts the lease of a delivered, unsettled message with the
	// ack timeout it was received with. A stale id returns an error
	// wrapping ErrStale and never touches a newer delivery.
	Extend(ctx context.Context, id AckID) error
}

// DeadLetterer is implemented by subscriptions that can move a message to
// a dead-letter topic and settle it in one atomic step. Without it the bus
// publishes the copy and then acks the original, which can leave a
// duplicate dead letter after a crash but never loses one.
type DeadLetterer interface {
	// DeadLetter stores msg (the copy built by NewDeadLetter, dead-letter
	// headers included) on topic and settles id, atomically. A stale id
	// returns an error wrapping ErrStale and stores nothing.
	DeadLetter(ctx context.Context, id AckID, topic string, msg *Message) error
}

// Releaser is implemented by subscriptions that can give a delivery back
// to its group without counting it as an attempt. The bus releases the
// deliveries whose handler a shutdown cancelled (Subscription.Close, the
// Subscribe ctx ending, Bus.Close): a shutdown is not a failure, so a
// message must not be dead-lettered for max deliveries because the
// processes handling it were restarted. Without it the bus nacks with no
// delay, and the shutdown counts as an attempt.
type Releaser interface {
	// Release makes id available to its group again at once (as Nack with
	// no delay does), and the message's next delivery has the same Attempt
	// as this one. A backend whose server keeps the delivery count
	// corrects the count there, or records the correction at the broker
	// so that every member sees it; a correction kept only in the
	// releasing process is not enough, since the next delivery usually
	// goes to another process. A stale id returns an error wrapping
	// ErrStale and never touches a newer delivery.
	Release(ctx context.Context, id AckID) error
}

// Snoozer is implemented by subscriptions that can give a delivery back
// to its group after a delay without counting it as an attempt: the bus
// uses it for Delivery.Snooze and for a message delivered before its
// DeliverAt. Without it the bus nacks with the delay, and the snooze
// counts.
type Snoozer interface {
	// Snooze makes id available to its group again after delay (0 = at
	// once), and the message's next delivery has the same Attempt as this
	// one; the count is kept at the broker, as Release keeps it. Snooze is
	// atomic like Nack: a crash leaves the message pending or scheduled,
	// never lost. A stale id returns an error wrapping ErrStale and never
	// touches a newer delivery. A backend that cannot leave a delivery
	// uncounted this time (a broker-side delivery limit is near) returns
	// an error wrapping ErrSnoozeLimit and changes nothing; the bus then
	// nacks. The bus passes a delay of 0 to MaxDelay.
	Snooze(ctx context.Context, id AckID, delay time.Duration) error
}

// PartialReceiver is implemented by subscriptions whose Receive may
// return before everything it asked the broker for has arrived (a NATS
// pull request for a batch delivers its messages one by one). The bus
// keeps capacity for the rest, so that what arrives later never runs
// without it.
type PartialReceiver interface {
	// Coming reports, after a Receive returned, how many messages that
	// Receive or an earlier one asked the broker for and has not returned
	// yet: they arrive later, and a later Receive returns them. The bus
	// keeps that many units of the capacity of the Receive that asked for
	// them, and passes a max of at least Coming to the next Receive. A
	// Receive whose ctx has ended returns what is coming or leaves it to
	// its lease, as it does the messages of a request cut short, so that
	// Coming is 0 after it; the bus calls one such Receive before it
	// stops fetching while messages are coming. Coming is called from the
	// goroutine that calls Receive.
	Coming() int
}

// EachPublisher is implemented by backends that confirm each message of a
// batch on its own (NATS JetStream acks each publish). The bus uses it for
// PublishAsync: a message's result, and its room in the publish window,
// are given back when its confirmation arrives, not when the last of its
// batch does.
type EachPublisher interface {
	// PublishEach stores the messages of the batch as Publish does, and
	// reports the outcome of message i by calling report(i, err) once for
	// every i: nil once it is stored, with the guarantee of a nil error
	// from Publish, or the error Publish would list for it in a
	// BatchError. Calls may come before PublishEach returns, from any
	// goroutine, concurrently, in any order (as with Publish, a later
	// message may be stored while an earlier one fails); report must not
	// block on the backend. PublishEach returns once every report call has
	// returned. A non-nil error is the outcome of every message not
	// reported: a backend may return one for the whole batch (it is
	// closed, the topic cannot be set up) instead of reporting each
	// message. msgs belong to the backend until PublishEach
	// returns. The rest of Publish's contract applies: no retry, return by
	// ctx's deadline, ErrClosed after Close, concurrent calls.
	PublishEach(ctx context.Context, topic string, msgs []*Message, report func(i int, err error)) error
}

// MaxDelay is the longest delay the bus asks of a backend (Nack, Snooze):
// a longer retry, snooze or nack delay waits MaxDelay. It keeps every
// due time within what the brokers carry (nats-server keeps redelivery
// times in int64 nanoseconds since the Unix epoch, which end in 2262).
const MaxDelay = 100 * 365 * 24 * time.Hour

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
	// PublishDedup: a message whose ID the caller set is stored once
	// within the backend's dedup window, however often it is published
	// (Message.IDGenerated). Without it every Publish stores a new copy:
	// a caller that retries a Publish may cause a duplicate, which the
	// consumer must tolerate (at-least-once).
	PublishDedup bool
	// Extend: subscriptions implement Extender. It must agree with the
	// type assertion; the conformance suite checks that it does.
	Extend bool
	// Scheduling: the broker holds a message published with a
	// HeaderDeliverAt until that time, so no member receives it before.
	// Without it the message is stored at once and the bus gives each
	// early delivery back until it is due (see Snoozer).
	Scheduling bool
	// KeyOwnership: the backend's own group assignment gives each key to
	// one member of a group at a time, and a member that loses a key (a
	// rebalance, Close) lets its deliveries of that key settle, or gives
	// them back ahead of the key's later messages, before another member
	// receives any of them; a member that dies loses its keys within a
	// bound the backend documents. With it the bus takes no group lock
	// for a key-ordered subscription (bus.WithKeyOrdering), even when the
	// backend is a GroupLocker: every member fetches, and the assignment
	// keeps each key on one member.
	KeyOwnership bool
	// MaxPayload is the largest payload the backend accepts (0 = no limit
	// of its own). The bus uses the smaller of this and WithMaxPayload.
	MaxPayload int
	// MaxPayloadLimit says what sets MaxPayload and how to raise it, in
	// words the bus puts in the error of a payload over it: for example
	// "the NATS server's max_payload (1048576 bytes) less 65536 bytes kept
	// for headers; raise max_payload in the server's configuration".
	// Empty: the bus names the backend's limit and no more.
	MaxPayloadLimit string
	// Broadcast: the backend implements GroupDeleter, GroupLocker and
	// Inspector, so the bus can give a subscription a group of its own
	// that no process leaves behind (bus.WithBroadcast). It must agree
	// with the type assertions; the conformance suite checks that.
	Broadcast bool
	// BroadcastNeeds, when Broadcast is false, says what the backend
	// needs for broadcast subscriptions, in words the bus puts in the
	// error of bus.WithBroadcast after "it needs": for example "the
	// management API; set the management URL parameter". Empty: the bus
	// says the backend lacks them.
	BroadcastNeeds string
	// Results: the backend implements ResultStore, so handlers may
	// leave a result that callers read by message ID (bus.Bus.Result).
	Results bool
	// AsyncBatches is how many PublishAsync batches of one topic the
	// backend keeps busy at once: more for a backend that confirms each
	// message on its own (0: the bus's default, 8).
	AsyncBatches int
}

// Failure is one failed message of a batch: its position in the batch,
// its message ID and the error. A backend may leave ID empty; the bus
// fills it in before the failure reaches the caller (bus.PublishError).
type Failure struct {
	Index int
	ID    string
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
