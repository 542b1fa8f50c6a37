package watermill

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/eventbus-go/bus"
)

// Unlimited as SubscriberConfig.MaxDeliveries retries a nacked message
// without a limit, as Watermill's own Pub/Subs do.
const Unlimited = -1

// unlimitedDeliveries is the max deliveries Unlimited stands for: more
// than a message retried every millisecond reaches in three weeks, and
// within what every backend counts.
const unlimitedDeliveries = math.MaxInt32

// DefaultCloseTimeout is how long Close waits for the messages already
// handed out to be acked or nacked when SubscriberConfig leaves
// CloseTimeout zero.
const DefaultCloseTimeout = 30 * time.Second

// errNacked is the handler error that a Nack becomes.
var errNacked = errors.New("watermill: message nacked")

// SubscriberConfig configures a Subscriber. The zero value is valid.
type SubscriberConfig struct {
	// Group is the consumer group (bus.WithGroup; the bus's default group
	// when empty). The Subscribe calls of one group share the messages,
	// in one process or many; every group gets every message. A group
	// created by this Subscriber starts from the oldest message of the
	// topic (bus.StartOldest), as Watermill's Redis Streams Pub/Sub does,
	// on a backend that can (Capabilities.StartOldest; on RabbitMQ a group
	// starts with what is published after it was created); an existing
	// group resumes where it stands.
	Group string
	// MaxInFlight is how many messages one Subscribe call hands out at
	// once, waiting for their Ack or Nack (default 1: the next message
	// comes after the previous one is settled, in order, as Watermill's
	// Pub/Subs deliver). Watermill's router handles each message it
	// receives in a goroutine of its own, so a larger value handles that
	// many at once.
	MaxInFlight int
	// MaxDeliveries is the delivery after which a nacked message is
	// dead-lettered (bus.WithMaxDeliveries; 0: the bus's default, 10).
	// Unlimited retries it forever, as Watermill's own Pub/Subs do.
	MaxDeliveries int
	// KeyOrdering handles the messages with the same bus Key one at a
	// time, in publish order, across the members of the group
	// (bus.WithKeyOrdering); PublisherConfig picks the Key.
	KeyOrdering bool
	// CloseTimeout bounds how long Close waits for the messages already
	// handed out to be acked or nacked (default DefaultCloseTimeout).
	CloseTimeout time.Duration
	// Options are further options for every bus subscription, applied
	// after the ones above (a later option wins): bus.WithLimiter,
	// bus.WithAckTimeout, bus.WithMaxExtension, bus.WithRetryBackoff,
	// bus.WithDeadLetter, bus.WithHandlerTimeout, bus.WithMiddleware ...
	// bus.WithAckMode has no effect: the Subscriber settles by Ack and
	// Nack (bus.AckOnSuccess).
	Options []bus.SubscribeOption
}

// Subscriber is a Watermill message.Subscriber that consumes through a
// bus.Bus. It is safe for concurrent use.
type Subscriber struct {
	b    *bus.Bus
	cfg  SubscriberConfig
	opts []bus.SubscribeOption

	mu     sync.Mutex
	closed bool
	subs   map[*subscription]struct{}
	wg     sync.WaitGroup // one per subscription's closer goroutine
}

var (
	_ message.Subscriber           = (*Subscriber)(nil)
	_ message.SubscribeInitializer = (*Subscriber)(nil)
)

// NewSubscriber returns a Subscriber over b. The Subscriber does not own
// b: its Close leaves b open, and b must outlive it.
func NewSubscriber(b *bus.Bus, cfg SubscriberConfig) (*Subscriber, error) {
	if b == nil {
		return nil, fmt.Errorf("%w: nil bus", bus.ErrInvalidOption)
	}
	switch {
	case cfg.MaxInFlight < 0:
		return nil, fmt.Errorf("%w: max in flight %d, want >= 0", bus.ErrInvalidOption, cfg.MaxInFlight)
	case cfg.MaxDeliveries < Unlimited:
		return nil, fmt.Errorf("%w: max deliveries %d, want >= 1, 0 (default) or Unlimited", bus.ErrInvalidOption, cfg.MaxDeliveries)
	case cfg.CloseTimeout < 0:
		return nil, fmt.Errorf("%w: close timeout %v, want >= 0", bus.ErrInvalidOption, cfg.CloseTimeout)
	}
	if cfg.MaxInFlight == 0 {
		cfg.MaxInFlight = 1
	}
	if cfg.CloseTimeout == 0 {
		cfg.CloseTimeout = DefaultCloseTimeout
	}
	opts := []bus.SubscribeOption{
		bus.WithMaxInFlight(cfg.MaxInFlight),
		bus.WithAckMode(bus.AckOnSuccess),
	}
	if b.Capabilities().StartOldest {
		opts = append(opts, bus.WithStartFrom(bus.StartOldest))
	}
	if cfg.Group != "" {
		opts = append(opts, bus.WithGroup(cfg.Group))
	}
	switch cfg.MaxDeliveries {
	case 0:
	case Unlimited:
		opts = append(opts, bus.WithMaxDeliveries(unlimitedDeliveries))
	default:
		opts = append(opts, bus.WithMaxDeliveries(cfg.MaxDeliveries))
	}
	if cfg.KeyOrdering {
		opts = append(opts, bus.WithKeyOrdering())
	}
	opts = append(opts, cfg.Options...)
	// AckOnSuccess again, last: Ack and Nack map onto a handler's result.
	opts = append(opts, bus.WithAckMode(bus.AckOnSuccess))
	return &Subscriber{b: b, cfg: cfg, opts: opts, subs: make(map[*subscription]struct{})}, nil
}

// SubscribeInitialize creates the subscriber's group on topic
// (bus.Bus.CreateGroup), so that the group keeps what is published before
// its first Subscribe: Watermill calls it before it publishes, where a
// new group cannot start from the oldest message (RabbitMQ). It implements
// message.SubscribeInitializer and returns within ten seconds.
func (s *Subscriber) SubscribeInitialize(topic string) error {
	if s.isClosed() {
		return ErrClosed
	}
	group := s.cfg.Group
	if group == "" {
		group = bus.DefaultGroup
	}
	ctx, cancel := context.WithTimeout(context.Background(), initializeTimeout)
	defer cancel()
	return s.b.CreateGroup(ctx, topic, group)
}

// initializeTimeout bounds SubscribeInitialize.
const initializeTimeout = 10 * time.Second

// subscription is one Subscribe call: a bus subscription whose handler
// hands each delivery to out as a Watermill message and waits for its Ack
// or Nack.
type subscription struct {
	bs       *bus.Subscription
	out      chan *message.Message
	stopSend chan struct{} // closed when Close starts: hand out nothing more

	mu        sync.RWMutex // held for reading while a handler sends on out
	outClosed bool
	stopOnce  sync.Once
}

// Subscribe starts a bus subscription on topic and returns the channel its
// messages arrive on. Each message must be acked or nacked:
//   - Ack settles it (the bus acks it);
//   - Nack makes it fail: it is delivered again after the bus's retry
//     backoff (bus.WithRetryBackoff: 100 ms doubling to 30 s by default),
//     and dead-lettered to "<topic>.dlq" (bus.WithDeadLetter) at
//     MaxDeliveries.
//
// The message's context is the bus handler's: it carries the lease
// keep-alive (while a message waits for its Ack the bus keeps its lease,
// see bus.WithMaxExtension) and it is cancelled once the message is
// settled, when ctx ends, and when Close gives up waiting. The channel is
// closed when the subscription ends: ctx ends, Close, the bus closes, or
// the backend fails for good. Messages handed out and not settled by then
// come back to the group.
func (s *Subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	if s.isClosed() {
		return nil, ErrClosed
	}
	sub := &subscription{out: make(chan *message.Message), stopSend: make(chan struct{})}
	// No lock is held across Subscribe, which may create the group at
	// the broker.
	bs, err := s.b.Subscribe(ctx, topic, sub.handle, s.opts...)
	if err != nil {
		return nil, fmt.Errorf("watermill: subscribe %q: %w", topic, err)
	}
	sub.bs = bs
	s.mu.Lock()
	closed := s.closed
	if !closed {
		s.subs[sub] = struct{}{}
		s.wg.Add(1)
		go s.await(sub)
	}
	s.mu.Unlock()
	if closed {
		// Close ran meanwhile and did not see this subscription; no
		// message was handed out.
		sub.stop()
		closeCtx, cancel := context.WithTimeout(context.Background(), s.cfg.CloseTimeout)
		defer cancel()
		if err := bs.Close(closeCtx); err != nil {
			return nil, errors.Join(ErrClosed, err)
		}
		return nil, ErrClosed
	}
	return sub.out, nil
}

// await closes sub's channel and forgets sub once its bus subscription
// has ended.
func (s *Subscriber) await(sub *subscription) {
	defer s.wg.Done()
	<-sub.bs.Done()
	sub.closeOut()
	s.mu.Lock()
	delete(s.subs, sub)
	s.mu.Unlock()
}

func (s *Subscriber) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// handle is the bus handler: it hands the message out and waits for its
// settlement.
func (sub *subscription) handle(ctx context.Context, d *bus.Delivery) error {
	msg, err := fromBus(d)
	if err != nil {
		return bus.Reject(err)
	}
	msgCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	msg.SetContext(msgCtx)
	if err := sub.send(ctx, msg); err != nil {
		return err
	}
	select {
	case <-msg.Acked():
		return nil
	case <-msg.Nacked():
		return errNacked
	case <-ctx.Done():
		return ctx.Err()
	}
}

// send hands msg out. When Close has started first, the message goes back
// to the group at once without counting a delivery (bus.Snooze).
func (sub *subscription) send(ctx context.Context, msg *message.Message) error {
	sub.mu.RLock()
	defer sub.mu.RUnlock()
	if sub.outClosed {
		return bus.Snooze(time.Millisecond)
	}
	select {
	case sub.out <- msg:
		return nil
	case <-sub.stopSend:
		return bus.Snooze(time.Millisecond)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stop makes the handlers hand out nothing more.
func (sub *subscription) stop() {
	sub.stopOnce.Do(func() { close(sub.stopSend) })
}

// closeOut closes out once no handler sends on it.
func (sub *subscription) closeOut() {
	sub.stop()
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if !sub.outClosed {
		sub.outClosed = true
		close(sub.out)
	}
}

// Close ends every subscription of the Subscriber like
// bus.Subscription.Close: it stops fetching and handing out messages,
// waits up to CloseTimeout for the messages already handed out to be
// acked or nacked, then cancels their contexts (those messages come back
// to the group without counting a delivery, and Close does not count
// them as an error, as Watermill's Pub/Subs do not), flushes the
// settlements and closes the channels. It returns once every channel is
// closed, with an error when a subscription failed to stop. Later
// Subscribe calls return ErrClosed. It is safe to call more than once.
func (s *Subscriber) Close() error {
	s.mu.Lock()
	s.closed = true
	subs := make([]*subscription, 0, len(s.subs))
	for sub := range s.subs {
		subs = append(subs, sub)
	}
	s.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.CloseTimeout)
	defer cancel()
	errs := make([]error, len(subs))
	var wg sync.WaitGroup
	for i, sub := range subs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sub.stop()
			// A drain cut short by CloseTimeout is no failure: the
			// handlers return on their cancelled ctx and the unsettled
			// messages go back to the group.
			if err := sub.bs.Close(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
				errs[i] = err
			}
			sub.closeOut()
		}()
	}
	wg.Wait()
	s.wg.Wait()
	return errors.Join(errs...)
}
