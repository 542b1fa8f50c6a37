package bus

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/observer"
)

// Option configures a Bus (New, Open).
type Option interface{ applyBus(*busOptions) error }

// SubscribeOption configures one subscription.
type SubscribeOption interface {
	applySubscribe(*subscribeOptions) error
}

// AckMode says when a delivery is settled. Its value is its name; the
// zero value is AckOnSuccess.
type AckMode string

const (
	// AckOnSuccess (the default): a nil handler return acks; an error
	// nacks with the retry backoff, and rejected errors (Reject) or running out of
	// max deliveries dead-letter. At-least-once.
	AckOnSuccess AckMode = "on-success"
	// AckOnReceive acks before the handler runs. At-most-once: a handler
	// error or a crash loses the message; errors go to the observer.
	AckOnReceive AckMode = "on-receive"
	// AckManual: the handler settles with Ack, Nack, Reject, Snooze or
	// Extend; the delivery keeps its in-flight slot until then. Unsettled
	// deliveries are redelivered after the ack timeout.
	AckManual AckMode = "manual"
)

// known reports whether m is one of the ack modes; "" is AckOnSuccess.
func (m AckMode) known() bool {
	switch m {
	case AckOnSuccess, "", AckOnReceive, AckManual:
		return true
	}
	return false
}

// DefaultGroup is the consumer group of a subscription made without
// WithGroup.
const DefaultGroup = "default"

// Defaults of the subscribe options.
const (
	defaultGroup          = DefaultGroup
	defaultMaxInFlight    = 64
	defaultAckTimeout     = 30 * time.Second
	defaultMaxDeliveries  = 10
	defaultDeadLetterSfx  = ".dlq"
	defaultRetryInitial   = 100 * time.Millisecond
	defaultRetryMaxDelay  = 30 * time.Second
	minAckTimeout         = 10 * time.Millisecond
	maxInFlightUpperBound = 1 << 16
	// defaultMaxExtension is how long, by default, the bus keeps a running
	// handler's lease alive (see WithMaxExtension).
	defaultMaxExtension = time.Hour
	// defaultMaxWaiting is the least default bound of the deliveries
	// waiting for their key (see WithMaxWaiting); it is
	// waitingPerInFlight times max in flight when that is more.
	defaultMaxWaiting  = 1024
	waitingPerInFlight = 4
	maxWaitingBound    = 1 << 20
)

type busOptions struct {
	observer      observer.Observer
	logger        *slog.Logger
	middleware    []Middleware
	publishMW     []PublishMiddleware
	maxPayload    int
	maxPayloadSet bool // by WithMaxPayload
	// payloadLimit says what sets maxPayload and how to raise it.
	payloadLimit string
	ackBatch     int
	ackInterval  time.Duration
	batching     PublishBatching
	events       string // the lifecycle events topic; "": events off
	eventsBound  backend.RetentionBound
}

type subscribeOptions struct {
	group          string
	ackMode        AckMode
	maxInFlight    int
	maxInFlightSet bool
	autoscaleMin   int // 0: no autoscaling (see WithAutoscale)
	autoscaleMax   int
	limiter        Limiter
	ackTimeout     time.Duration
	maxDeliveries  int
	maxDelivSet    bool
	groupSet       bool
	deadLetter     string
	deadLetterSet  bool
	newBackOff     func() backoff.BackOff
	handlerTimeout time.Duration
	startFrom      backend.StartFrom
	middleware     []Middleware
	maxExtension   time.Duration
	keyOrdering    bool
	keyHold        bool    // WithKeyFailure(KeyHold)
	maxWaiting     int     // 0: the default (see WithMaxWaiting)
	decoder        decoder // a typed subscription's (see Topic.Subscribe), or nil
	// batchMax and batchWait are WithBatch's (batchSet); batching marks a
	// SubscribeBatch subscription, whose batcher takes them.
	batchMax  int
	batchWait time.Duration
	batchSet  bool
	batching  bool
	batcher   *batcher
	// broadcast and broadcastExpiry are WithBroadcast's and
	// WithBroadcastExpiry's (0: the default).
	broadcast       bool
	broadcastExpiry time.Duration
	// resultTTL is WithResultTTL's (0: DefaultResultTTL).
	resultTTL time.Duration
}

type busOptionFunc func(*busOptions) error

func (f busOptionFunc) applyBus(o *busOptions) error { return f(o) }

type subOptionFunc func(*subscribeOptions) error

func (f subOptionFunc) applySubscribe(o *subscribeOptions) error { return f(o) }

// WithObserver sets the observer that receives background errors. Without
// one, the bus logs them through observer.Slog over the logger (see
// WithLogger): failures are never silent by default;
// WithObserver(observer.Nop()) silences them. Several calls add observers
// (see observer.Multi).
func WithObserver(o observer.Observer) Option {
	return busOptionFunc(func(b *busOptions) error {
		if o == nil {
			return fmt.Errorf("%w: nil observer", ErrInvalidOption)
		}
		if b.observer == nil {
			b.observer = o
		} else {
			b.observer = observer.Multi(b.observer, o)
		}
		return nil
	})
}

// WithLogger sets the logger for the bus's own lifecycle messages (never
// payloads), and for its failures when no observer is set. The default is
// slog.Default().
func WithLogger(l *slog.Logger) Option {
	return busOptionFunc(func(b *busOptions) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", ErrInvalidOption)
		}
		b.logger = l
		return nil
	})
}

// WithPublishMiddleware wraps every Publish call, outermost first.
func WithPublishMiddleware(mw ...PublishMiddleware) Option {
	return busOptionFunc(func(b *busOptions) error {
		for _, m := range mw {
			if m == nil {
				return fmt.Errorf("%w: nil publish middleware", ErrInvalidOption)
			}
		}
		b.publishMW = append(b.publishMW, mw...)
		return nil
	})
}

// WithMaxPayload sets the largest payload Publish accepts (default
// DefaultMaxPayload, 1 MiB). A backend with a smaller limit of its own
// (Capabilities.MaxPayload) lowers it, and WithMaxPayload cannot raise
// it past that: NATS takes its server's max_payload less 64 KiB kept for
// the message's headers (983,040 bytes with nats-server's default
// max_payload of 1 MiB); Redis and PostgreSQL take their max_payload URL
// parameter (64 MiB by default); mem has none. Bus.MaxPayload reports
// the limit in force, and a payload over it fails with
// ErrPayloadTooLarge naming the limit that refused it and how to raise
// it.
func WithMaxPayload(n int) Option {
	return busOptionFunc(func(b *busOptions) error {
		if n <= 0 {
			return fmt.Errorf("%w: max payload %d, want > 0", ErrInvalidOption, n)
		}
		b.maxPayload, b.maxPayloadSet = n, true
		return nil
	})
}

// WithEvents turns lifecycle events on: at each step of a delivery
// (received, succeeded, failed, retry scheduled, snoozed, dead-lettered,
// expired) and when a dead letter is replayed, the bus writes one event,
// a JSON object, to topic on its own backend, packed up to 256 to a
// message as JSON Lines: an ordinary topic that tail, inspection,
// retention and replay work on, and that `bus history` reads. The events
// of one subscription's member are packed together, their topic, group
// and member in the message's headers. Events are buffered and published
// in batches by a goroutine of the bus; they never block or slow a
// handler: when the buffer is full an event is dropped, counted, and the
// first drop is reported to the observer. Close publishes what is
// buffered. Deliveries of topic itself make no events. The schema and the
// format are documented in docs/operating.md.
func WithEvents(topic string) Option {
	return busOptionFunc(func(b *busOptions) error {
		if err := backend.ValidateTopic(topic); err != nil {
			return fmt.Errorf("%w: events topic: %w", ErrInvalidOption, err)
		}
		b.events = topic
		return nil
	})
}

// WithEventsRetention caps what the lifecycle events topic (WithEvents)
// retains, whether or not anything consumes it: events older than maxAge
// are dropped, and about the newest maxLen messages (each packs up to 256
// events) are kept. A zero value is no cap of that kind; the defaults are
// DefaultEventsMaxAge (24h) and DefaultEventsMaxLen (100,000 messages).
// The backend enforces the cap on its own (backend.RetentionBounder),
// with no subscriber running; docs/backends.md says how closely on each
// backend. The cap applies to the events topic only and may drop events
// a group has not handled.
func WithEventsRetention(maxAge time.Duration, maxLen int) Option {
	return busOptionFunc(func(b *busOptions) error {
		if maxAge < 0 || maxLen < 0 {
			return fmt.Errorf("%w: events retention %v and %d messages, want >= 0", ErrInvalidOption, maxAge, maxLen)
		}
		b.eventsBound = backend.RetentionBound{MaxAge: maxAge, MaxLen: int64(maxLen)}
		return nil
	})
}

// middlewareOption is returned by WithMiddleware; it is both a bus Option
// (applies to every subscription) and a SubscribeOption (applies to one).
type middlewareOption struct{ mw []Middleware }

// WithMiddleware wraps handlers, outermost first. On New/Open it applies to
// every subscription (outside the subscription's own middleware); on
// Subscribe to that subscription.
func WithMiddleware(mw ...Middleware) interface {
	Option
	SubscribeOption
} {
	return middlewareOption{mw: mw}
}

func (m middlewareOption) check() error {
	for _, f := range m.mw {
		if f == nil {
			return fmt.Errorf("%w: nil middleware", ErrInvalidOption)
		}
	}
	return nil
}

func (m middlewareOption) applyBus(b *busOptions) error {
	if err := m.check(); err != nil {
		return err
	}
	b.middleware = append(b.middleware, m.mw...)
	return nil
}

func (m middlewareOption) applySubscribe(s *subscribeOptions) error {
	if err := m.check(); err != nil {
		return err
	}
	s.middleware = append(s.middleware, m.mw...)
	return nil
}

// WithGroup sets the consumer group (default "default"). Subscriptions in
// one group share the messages; every group gets every message. A
// subscription has one group: giving two different groups is an error.
// Names that start with "_broadcast." are kept for broadcast
// subscriptions (WithBroadcast).
func WithGroup(group string) SubscribeOption {
	return subOptionFunc(func(s *subscribeOptions) error {
		if err := backend.ValidateTopic(group); err != nil {
			return fmt.Errorf("%w: group %q: must follow the topic rules", ErrInvalidOption, group)
		}
		if strings.HasPrefix(group, broadcastPrefix) {
			return fmt.Errorf("%w: group %q: the prefix %q is kept for the groups of broadcast subscriptions (WithBroadcast)", ErrInvalidOption, group, broadcastPrefix)
		}
		if s.groupSet && s.group != group {
			return fmt.Errorf("%w: WithGroup given twice (%q, then %q); a subscription has one group: give one WithGroup, or subscribe once per group", ErrInvalidOption, s.group, group)
		}
		s.group, s.groupSet = group, true
		return nil
	})
}

// WithAckMode sets the ack mode (default AckOnSuccess).
func WithAckMode(m AckMode) SubscribeOption {
	return subOptionFunc(func(s *subscribeOptions) error {
		if !m.known() {
			return fmt.Errorf("%w: ack mode %q (want %q, %q or %q)", ErrInvalidOption, string(m), AckOnSuccess, AckOnReceive, AckManual)
		}
		if m == "" {
			m = AckOnSuccess
		}
		s.ackMode = m
		return nil
	})
}

// WithMaxInFlight caps the deliveries this subscription holds unsettled at
// once (default 64): handlers running, and in AckManual deliveries whose
// handler returned unsettled. With WithKeyOrdering, the deliveries that
// wait for their key are not counted here (see WithMaxWaiting). Capacity
// is taken before the backend is asked for messages. WithAutoscale moves
// the bound instead.
func WithMaxInFlight(n int) SubscribeOption {
	return subOptionFunc(func(s *subscribeOptions) error {
		if n < 1 || n > maxInFlightUpperBound {
			return fmt.Errorf("%w: max in flight %d, want 1..%d", ErrInvalidOption, n, maxInFlightUpperBound)
		}
		s.maxInFlight, s.maxInFlightSet = n, true
		return nil
	})
}

// WithLimiter adds a limiter on top of max in flight, for example a rate
// limiter or a concurrency limiter shared by several subscriptions.
func WithLimiter(l Limiter) SubscribeOption {
	return subOptionFunc(func(s *subscribeOptions) error {
		if l == nil {
			return fmt.Errorf("%w: nil limiter", ErrInvalidOption)
		}
		s.limiter = l
		return nil
	})
}

// WithAckTimeout sets the lease of a delivery (default 30s, at least
// 10ms). A delivery not settled within it is redelivered.
func WithAckTimeout(d time.Duration) SubscribeOption {
	return subOptionFunc(func(s *subscribeOptions) error {
		if d < minAckTimeout {
			return fmt.Errorf("%w: ack timeout %v, want >= %v", ErrInvalidOption, d, minAckTimeout)
		}
		s.ackTimeout = d
		return nil
	})
}

// WithMaxExtension caps how long the bus keeps a delivery's lease alive
// while its handler runs (default one hour), counted
// from when the message was received. While the handler runs, the bus
// extends the lease through the backend about every quarter of the ack
// timeout, so the ack timeout only matters when a process dies or hangs.
// When the lease cannot be kept (the cap is reached, an extension fails, or
// the backend cannot extend leases) the handler's ctx is cancelled with
// cause ErrLeaseLost before the message can be delivered again. 0 turns
// the keep-alive off: a handler then has its ack timeout (half of it, to
// be safe from a concurrent redelivery) before its ctx is cancelled.
func WithMaxExtension(d time.Duration) SubscribeOption {
	return subOptionFunc(func(s *subscribeOptions) error {
		if d < 0 {
			return fmt.Errorf("%w: max extension %v, want >= 0", ErrInvalidOption, d)
		}
		s.maxExtension = d
		return nil
	})
}

// WithKeyOrdering handles the deliveries of the subscription whose
// Message.Key is equal and non-empty one at a time, in the order the
// backend hands them out (for a topic, the order of the Publish calls that
// returned nil from one goroutine); different keys, and messages without
// a key, run in parallel up to MaxInFlight. A delivery of a key that is to
// be retried (a handler error, or Nack in AckManual) is retried by the
// subscription itself after its delay, keeping its lease alive and its
// in-flight slot, and holds back only its own key; dead-lettering it
// releases the key. Deliveries waiting behind their key's head, running
// or retrying, take no in-flight slot: they sit in a waiting set bounded
// by WithMaxWaiting (default 1024, or 4 x MaxInFlight when more), with
// their leases kept alive, so that a busy or retrying key never stops
// the other keys while the waiting set has room. Fetching pauses only
// while the waiting set is full.
//
// On a backend with a group lock (backend.GroupLocker: mem, Redis, NATS
// JetStream, PostgreSQL and RabbitMQ) one member of the group consumes at a time; the others
// take over when it closes or dies, so the order holds across members in
// one process or many. A member that takes over from one that died
// holds back only the keys the dead member left unsettled, until their
// leases end, and runs the others within seconds (on a backend with
// backend.PendingLister; without it, it waits 1.5 s and one ack timeout). On a
// backend whose own group assignment keeps each key on one member
// (backend.Capabilities.KeyOwnership: Kafka) every member fetches, with
// no group lock, and a key moves between members only once its old
// member settled or gave back what it held of it. On a backend with
// neither the order holds within one subscription only: run one member
// per group. When a subscription
// closes, the deliveries waiting for their key go back to the group. A
// delivery whose lease is lost while its handler runs (its member
// crashed, or the keep-alive failed) is delivered again after the lease,
// possibly after later messages of its key; one whose lease is lost
// while it waits holds its key until it is delivered again (for at most
// two ack timeouts and 1.5 s). See docs/ordering.md.
func WithKeyOrdering() SubscribeOption {
	return subOptionFunc(func(s *subscribeOptions) error {
		s.keyOrdering = true
		return nil
	})
}

// WithMaxWaiting bounds the deliveries of a key-ordered subscription
// (WithKeyOrdering) that wait for their key, behind a head that runs or
// waits for its retry, or, fetched beyond the free in-flight slots, for
// a slot: 1..1048576, default 1024 or 4 x MaxInFlight, whichever is more.
// They hold no in-flight slot, so MaxInFlight bounds the handlers running
// at once; the subscription fetches while the waiting set has room, and
// pauses while it is full. Each waiting delivery keeps its message in memory and
// its lease alive. On a topic of N partitions each partition gets
// 1/N of the bound (at least 1). Giving it without
// WithKeyOrdering is an error.
func WithMaxWaiting(n int) SubscribeOption {
	return subOptionFunc(func(s *subscribeOptions) error {
		if n < 1 || n > maxWaitingBound {
			return fmt.Errorf("%w: max waiting %d, want 1..%d", ErrInvalidOption, n, maxWaitingBound)
		}
		s.maxWaiting = n
		return nil
	})
}

// heldBound is the most deliveries a subscription of o holds unsettled
// at once: those in flight, and with key ordering those waiting for
// their key (what backend.SubscribeConfig.MaxInFlight means).
func (o *subscribeOptions) heldBound() int {
	if !o.keyOrdering {
		return o.maxInFlight
	}
	return o.maxInFlight + o.waitingBound()
}

// waitingBound is the bound of the waiting set of o (WithMaxWaiting).
func (o *subscribeOptions) waitingBound() int {
	if o.maxWaiting > 0 {
		return o.maxWaiting
	}
	return max(defaultMaxWaiting, waitingPerInFlight*o.maxInFlight)
}

// WithMaxDeliveries sets the attempt after which a failing message is
// dead-lettered (default 10). AckOnReceive redelivers nothing, so giving
// both is an error.
func WithMaxDeliveries(n int) SubscribeOption {
	return subOptionFunc(func(s *subscribeOptions) error {
		if n < 1 {
			return fmt.Errorf("%w: max deliveries %d, want >= 1", ErrInvalidOption, n)
		}
		s.maxDeliveries, s.maxDelivSet = n, true
		return nil
	})
}

// WithDeadLetter sets the dead-letter topic (default "<topic>.dlq"). An
// empty topic turns dead-lettering off: such messages are acked, dropped
// and reported to the observer.
func WithDeadLetter(topic string) SubscribeOption {
	return subOptionFunc(func(s *subscribeOptions) error {
		if topic != "" {
			if err := backend.ValidateTopic(topic); err != nil {
				return fmt.Errorf("%w: dead-letter topic: %w", ErrInvalidOption, err)
			}
		}
		s.deadLetter, s.deadLetterSet = topic, true
		return nil
	})
}

// WithRetryBackoff sets the delay before a failed message is redelivered.
// newBackOff is called per failure and its NextBackOff is called attempt
// times; the last value is the delay, and backoff.Stop dead-letters at
// once; a delay longer than 100 years waits 100 years. The default is
// exponential with jitter, 100ms initial, 30s cap.
func WithRetryBackoff(newBackOff func() backoff.BackOff) SubscribeOption {
	return subOptionFunc(func(s *subscribeOptions) error {
		if newBackOff == nil {
			return fmt.Errorf("%w: nil backoff", ErrInvalidOption)
		}
		s.newBackOff = newBackOff
		return nil
	})
}

// WithHandlerTimeout gives each handler call a deadline; a timed-out
// handler counts as failed. The default is no deadline.
func WithHandlerTimeout(d time.Duration) SubscribeOption {
	return subOptionFunc(func(s *subscribeOptions) error {
		if d <= 0 {
			return fmt.Errorf("%w: handler timeout %v, want > 0", ErrInvalidOption, d)
		}
		s.handlerTimeout = d
		return nil
	})
}

// WithStartFrom sets where a new group starts: StartNewest (the
// default) delivers messages published after the group was created,
// StartOldest every message the topic still retains. It matters
// only when the group is created; an existing group resumes where it
// stands.
func WithStartFrom(f StartFrom) SubscribeOption {
	return subOptionFunc(func(s *subscribeOptions) error {
		if f != backend.StartNewest && f != backend.StartOldest {
			return fmt.Errorf("%w: start from %v", ErrInvalidOption, f)
		}
		s.startFrom = f
		return nil
	})
}

func defaultBackOff() backoff.BackOff {
	e := backoff.NewExponentialBackOff()
	e.InitialInterval = defaultRetryInitial
	e.MaxInterval = defaultRetryMaxDelay
	e.MaxElapsedTime = 0
	return e
}
