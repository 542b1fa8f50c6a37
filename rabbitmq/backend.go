package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/eventbus-go/bus/backend"
)

// Backend is the RabbitMQ backend. It is safe for concurrent use.
type Backend struct {
	url      string
	opts     Options
	pub      *link // publishing, declaring and moving copies
	sub      *link // the subscriptions' channels
	lockLink *link // owns the exclusive queues of the group locks
	streams  *link // the streams of partition counts and members (partition.go)
	lockSem  chan struct{}

	mu   sync.Mutex
	idle []*amqp.Channel // confirm-mode channels of pub, free for a publish
	// declared holds the exchanges, queues and bindings declared on
	// this backend, each with the publishing connection it was declared
	// on: a declaration counts only while that connection lives (see
	// declare).
	declared map[string]*amqp.Connection
	subs     map[*Subscription]struct{}
	locks    map[string]*heldLock // by lock queue
	lockSeq  uint64               // takes of a lock on this backend
	parts    sync.Map             // topic → its recorded partition count
	closed   bool
	// retention is the expiration (ms) of a bounded topic's messages.
	retention map[string]string
	// http reads the management API (inspect.go).
	http *http.Client
}

var (
	_ backend.Backend  = (*Backend)(nil)
	_ backend.Releaser = (*Subscription)(nil)
	_ backend.Snoozer  = (*Subscription)(nil)
	_ backend.Extender = (*Subscription)(nil)
)

// New connects to the broker at amqpURL (amqp:// or amqps://, without
// backend parameters; see OpenURL) and returns a backend. It dials its
// publishing connection and, at the same time, its streams connection
// (the first Publish of each topic reads the topic's partition count
// there) before it returns, bounded by ctx.
func New(ctx context.Context, amqpURL string, o *Options) (*Backend, error) {
	opts, err := o.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: %w", err)
	}
	if _, err := amqp.ParseURI(amqpURL); err != nil {
		return nil, fmt.Errorf("rabbitmq: %w: the URL does not parse", backend.ErrInvalidOption)
	}
	b := &Backend{url: amqpURL, opts: opts, declared: map[string]*amqp.Connection{}, subs: map[*Subscription]struct{}{},
		locks: map[string]*heldLock{}, lockSem: make(chan struct{}, 1)}
	b.pub = &link{b: b, name: "publish"}
	b.sub = &link{b: b, name: "consume"}
	b.lockLink = &link{b: b, name: "lock"}
	b.streams = &link{b: b, name: "streams"}
	b.http = &http.Client{Timeout: 2 * opts.DialTimeout}
	streams := make(chan error, 1)
	go func() {
		_, err := b.streams.get(ctx)
		streams <- err
	}()
	_, err = b.pub.get(ctx)
	if serr := <-streams; err == nil {
		err = serr
	}
	if err != nil {
		_ = b.Close()
		return nil, err
	}
	return b, nil
}

// Capabilities: see the package doc.
func (b *Backend) Capabilities() backend.Capabilities {
	c := backend.Capabilities{
		Name:           "rabbitmq",
		ConsumerGroups: true,
		Persistent:     true,
		Redelivery:     true,
		NackDelay:      true,
		Ordered:        true,
		Extend:         true,
		Scheduling:     true,
		Results:        true,
	}
	if b.opts.Management != "" {
		c.Broadcast = true
	} else {
		c.BroadcastNeeds = "the RabbitMQ management API to list the broadcast groups to delete; set the management URL parameter (e.g. ?management=http://127.0.0.1:15672) or Options.Management"
	}
	return c
}

// Publish stores msgs on topic's exchange, with publisher confirms: every
// message of the batch is written, then every confirm awaited.
func (b *Backend) Publish(ctx context.Context, topic string, msgs []*backend.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	ex := b.exchangeName(topic)
	if err := b.declareExchange(ctx, ex); err != nil {
		return fmt.Errorf("rabbitmq: publish %q: %w", topic, err)
	}
	pubs := make([]amqp.Publishing, len(msgs))
	exchanges := []string{ex}
	var keys []string
	due := backend.DueTimes(msgs)
	expiration := b.expiration(topic)
	for i, m := range msgs {
		if due == nil || due[i] == 0 {
			pubs[i] = encode(m, 0, 0)
			pubs[i].Expiration = expiration
			continue
		}
		left := time.Until(time.UnixMilli(due[i]))
		if left <= 0 {
			pubs[i] = encode(m, 0, 0)
			pubs[i].Expiration = expiration
			continue
		}
		// Held at the topic: a hold queue of the topic's delays
		// dead-letters it to the topic's exchange when it is due.
		h, err := b.declareTopicHold(ctx, ex, holdFor(left))
		if err != nil {
			return fmt.Errorf("rabbitmq: publish %q: %w", topic, err)
		}
		if keys == nil {
			exchanges, keys = make([]string, len(msgs)), make([]string, len(msgs))
			for j := range i {
				exchanges[j] = ex
			}
		}
		exchanges[i], keys[i] = h, ex
		pubs[i] = encode(m, 0, due[i])
	}
	if keys != nil {
		for i := range exchanges {
			if exchanges[i] == "" {
				exchanges[i] = ex
			}
		}
	}
	errs, err := b.publishConfirmed(ctx, exchanges, keys, pubs)
	if err != nil {
		return fmt.Errorf("rabbitmq: publish %q: %w", topic, err)
	}
	var be backend.BatchError
	for i, e := range errs {
		if e != nil {
			be.Failed = append(be.Failed, backend.Failure{Index: i, ID: msgs[i].ID, Err: e})
		}
	}
	if len(be.Failed) > 0 {
		// The broker refuses a publish to an exchange that is gone
		// (404, which closes the channel and nacks the batch): the next
		// Publish declares the exchanges again.
		b.forget(append(exchanges, "due "+ex)...)
		return &be
	}
	return nil
}

// errNacked is the error of a message the broker refused to store.
var errNacked = errors.New("rabbitmq: the broker nacked the message")

// errUnconfirmed is the error of a message whose channel closed before
// the broker confirmed it: the broker may have stored it or not.
var errUnconfirmed = errors.New("rabbitmq: the channel closed before the broker confirmed the message, which may be stored or not; publish it again (its consumers may then see it twice)")

// publishConfirmed publishes pubs[i] to exchanges[i] (exchanges[0] for
// every message when it has one) with routing key keys[i] ("" when keys
// is nil) on a confirm-mode channel and waits for every confirm. It
// returns each message's error (nil: stored), or an error for the whole
// batch when none is known to be stored.
func (b *Backend) publishConfirmed(ctx context.Context, exchanges, keys []string, pubs []amqp.Publishing) ([]error, error) {
	ch, err := b.confirmChannel(ctx)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		b.putChannel(ch)
		return nil, err
	}
	confs := make([]*amqp.DeferredConfirmation, len(pubs))
	uncork := b.pub.cork() // one write for the batch
	for i := range pubs {
		key, exchange := "", exchanges[0]
		if keys != nil {
			key = keys[i]
		}
		if len(exchanges) > 1 {
			exchange = exchanges[i]
		}
		c, err := ch.PublishWithDeferredConfirm(exchange, key, false, false, pubs[i])
		if err != nil {
			uncork()
			closeChannel(ch, b.opts.CloseTimeout)
			return nil, err
		}
		confs[i] = c
	}
	uncork()
	errs := make([]error, len(pubs))
	for i, c := range confs {
		ok, err := c.WaitContext(ctx)
		if err != nil {
			// The rest is unknown: the channel cannot be reused, since
			// its confirms would arrive for a later batch.
			go closeChannel(ch, b.opts.CloseTimeout)
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, err
		}
		if !ok {
			// The client resolves what is pending as nacked when the
			// channel closes: only a nack on a live channel is the
			// broker's.
			errs[i] = errNacked
			if ch.IsClosed() {
				errs[i] = errUnconfirmed
			}
		}
	}
	b.putChannel(ch)
	return errs, nil
}

// Ping opens a channel on the publishing connection (dialing it when it
// is down) and closes it: one round trip, channel.open and its reply,
// bounded by ctx.
func (b *Backend) Ping(ctx context.Context) error {
	b.mu.Lock()
	closed := b.closed
	b.mu.Unlock()
	if closed {
		return fmt.Errorf("rabbitmq: ping: %w", backend.ErrClosed)
	}
	ch, err := b.pub.channel(ctx)
	if err != nil {
		return fmt.Errorf("rabbitmq: ping: %w", err)
	}
	go closeChannel(ch, b.opts.CloseTimeout)
	return nil
}

// confirmChannel returns an idle confirm-mode channel or opens one.
func (b *Backend) confirmChannel(ctx context.Context) (*amqp.Channel, error) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, backend.ErrClosed
	}
	for len(b.idle) > 0 {
		ch := b.idle[len(b.idle)-1]
		b.idle = b.idle[:len(b.idle)-1]
		if !ch.IsClosed() {
			b.mu.Unlock()
			return ch, nil
		}
	}
	b.mu.Unlock()
	ch, err := b.pub.channel(ctx)
	if err != nil {
		return nil, err
	}
	if err := callCtx(ctx, ch, func() error { return ch.Confirm(false) }); err != nil {
		closeChannel(ch, b.opts.CloseTimeout)
		return nil, fmt.Errorf("confirm mode: %w", err)
	}
	return ch, nil
}

// putChannel gives ch back to the idle list.
func (b *Backend) putChannel(ch *amqp.Channel) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || ch.IsClosed() || len(b.idle) >= 16 {
		go closeChannel(ch, b.opts.CloseTimeout)
		return
	}
	b.idle = append(b.idle, ch)
}

// callCtx runs synchronous AMQP methods on ch in a goroutine and returns
// when they do or when ctx ends (they then finish, or fail when their
// connection dies, on their own, and a close of ch waits for them: see
// sendOn).
func callCtx(ctx context.Context, ch *amqp.Channel, f func() error) error {
	done := make(chan error, 1)
	go func() { done <- sendOn(ch, f) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// declare runs one declaration on a fresh channel of pub, once per
// publishing connection for each name: a connection lost may mean a
// node that lost its latest declarations, so the first use of name on
// the next connection declares it again.
func (b *Backend) declare(ctx context.Context, name string, f func(ch *amqp.Channel) error) error {
	b.mu.Lock()
	on := b.declared[name]
	b.mu.Unlock()
	if on != nil && !on.IsClosed() {
		return nil
	}
	conn, ch, err := b.pub.channelOn(ctx)
	if err != nil {
		return err
	}
	err = callCtx(ctx, ch, func() error { return f(ch) })
	go closeChannel(ch, b.opts.CloseTimeout)
	if err != nil {
		return fmt.Errorf("declare %q: %w", name, err)
	}
	b.mu.Lock()
	b.declared[name] = conn
	b.mu.Unlock()
	return nil
}

// forget makes the next use of each name declare it again.
func (b *Backend) forget(names ...string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, n := range names {
		delete(b.declared, n)
	}
}

// declareExchange declares topic's durable fanout exchange.
func (b *Backend) declareExchange(ctx context.Context, ex string) error {
	return b.declare(ctx, ex, func(ch *amqp.Channel) error {
		return ch.ExchangeDeclare(ex, amqp.ExchangeFanout, true, false, false, false, nil)
	})
}

// declareGroup declares the group's durable quorum queue and binds it to
// the topic's exchange.
func (b *Backend) declareGroup(ctx context.Context, topic, group string) (string, error) {
	ex, q := b.exchangeName(topic), b.queueName(topic, group)
	err := b.declare(ctx, q, func(ch *amqp.Channel) error { return declareGroupOn(ch, ex, q, false) })
	return q, err
}

// declareGroupOn declares the exchange ex, the group's quorum queue q
// and its binding to ex on ch. With noWait it sends the three without
// waiting for their replies: the broker runs a channel's methods in
// order, so the next synchronous method on ch returns after them, with
// the error of any that failed (which closes the channel).
func declareGroupOn(ch *amqp.Channel, ex, q string, noWait bool) error {
	if err := ch.ExchangeDeclare(ex, amqp.ExchangeFanout, true, false, false, noWait, nil); err != nil {
		return err
	}
	if _, err := ch.QueueDeclare(q, true, false, false, noWait, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		return err
	}
	return ch.QueueBind(q, "", ex, noWait, nil)
}

// declareHold declares the hold exchange and quorum queue of delay d:
// messages wait d in the queue, then are dead-lettered (at least once)
// through the default exchange with their routing key, the queue of the
// group they came from.
func (b *Backend) declareHold(ctx context.Context, d time.Duration) (string, error) {
	name := b.holdName(d)
	err := b.declare(ctx, name, func(ch *amqp.Channel) error {
		if err := ch.ExchangeDeclare(name, amqp.ExchangeFanout, true, false, false, false, nil); err != nil {
			return err
		}
		_, err := ch.QueueDeclare(name, true, false, false, false, amqp.Table{
			"x-queue-type":           "quorum",
			"x-message-ttl":          d.Milliseconds(),
			"x-dead-letter-exchange": "",
			"x-dead-letter-strategy": "at-least-once",
			"x-overflow":             "reject-publish",
		})
		if err != nil {
			return err
		}
		return ch.QueueBind(name, "", name, false, nil)
	})
	return name, err
}

// declareTopicHold declares the topic hold exchange and quorum queue of
// delay d, as declareHold does, dead-lettering to the backend's due
// exchange, and binds the topic's exchange ex to the due exchange with
// ex as the key: a message published to the hold with routing key ex
// reaches the topic's groups when d has passed.
func (b *Backend) declareTopicHold(ctx context.Context, ex string, d time.Duration) (string, error) {
	name, due := b.topicHoldName(d), b.dueName()
	err := b.declare(ctx, name, func(ch *amqp.Channel) error {
		if err := ch.ExchangeDeclare(due, amqp.ExchangeDirect, true, false, false, false, nil); err != nil {
			return err
		}
		if err := ch.ExchangeDeclare(name, amqp.ExchangeFanout, true, false, false, false, nil); err != nil {
			return err
		}
		_, err := ch.QueueDeclare(name, true, false, false, false, amqp.Table{
			"x-queue-type":           "quorum",
			"x-message-ttl":          d.Milliseconds(),
			"x-dead-letter-exchange": due,
			"x-dead-letter-strategy": "at-least-once",
			"x-overflow":             "reject-publish",
		})
		if err != nil {
			return err
		}
		return ch.QueueBind(name, "", name, false, nil)
	})
	if err != nil {
		return "", err
	}
	err = b.declare(ctx, "due "+ex, func(ch *amqp.Channel) error {
		return ch.ExchangeBind(ex, ex, due, false, nil)
	})
	return name, err
}

// storeCopy stores a copy of m with base attempts before it for the group
// queue q: at once in q, or, when due (Unix ms) is still to come, in the
// hold queue of the delay that fits, carrying due. It returns once the
// broker confirmed the copy.
func (b *Backend) storeCopy(ctx context.Context, q string, m *backend.Message, base int, due int64) error {
	left := time.Until(time.UnixMilli(due))
	exchange := ""
	if due > 0 && left > 0 {
		h, err := b.declareHold(ctx, holdFor(left))
		if err != nil {
			return err
		}
		exchange = h
	} else {
		due = 0
	}
	pub := []amqp.Publishing{encode(m, base, due)}
	// A quorum queue declared a moment ago nacks publishes until its
	// leader is elected; the copy is not stored, so storing it again
	// duplicates nothing.
	return retry(ctx, copyRetry, isNacked, func() error {
		errs, err := b.publishConfirmed(ctx, []string{exchange}, []string{q}, pub)
		if err != nil {
			return err
		}
		return errs[0]
	})
}

// copyRetry is how storeCopy stores a nacked copy again.
var copyRetry = backoffPolicy{first: 20 * time.Millisecond, most: time.Second, total: 1300 * time.Millisecond}

func isNacked(err error) bool { return errors.Is(err, errNacked) }

// backoffPolicy is how retry runs an operation again: after first,
// doubled after each run up to most, as long as the next run starts
// within total of the first.
type backoffPolicy struct{ first, most, total time.Duration }

// retry runs f until it returns nil or an error that again does not
// hold for, as p says, and returns f's last error; it returns that error
// too when ctx ends first.
func retry(ctx context.Context, p backoffPolicy, again func(error) bool, f func() error) error {
	wait := p.first
	deadline := time.Now().Add(p.total)
	for {
		err := f()
		if err == nil || !again(err) || time.Now().Add(wait).After(deadline) {
			return err
		}
		select {
		case <-time.After(wait):
			wait = min(2*wait, p.most)
		case <-ctx.Done():
			return err
		}
	}
}

// Close closes every subscription still open, at once, and then both
// connections: within about twice Options.CloseTimeout, also on a
// dead network.
func (b *Backend) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	subs := make([]*Subscription, 0, len(b.subs))
	for s := range b.subs {
		subs = append(subs, s)
	}
	b.idle = nil // closed with their connection
	for _, hl := range b.locks {
		hl.timer.Stop() // the broker deletes the lock queues with their connection
	}
	b.locks = map[string]*heldLock{}
	b.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range subs {
		wg.Go(func() { _ = s.Close() })
	}
	wg.Wait()
	wg.Go(b.sub.close)
	wg.Go(b.pub.close)
	wg.Go(b.lockLink.close)
	wg.Go(b.streams.close)
	wg.Wait()
	return nil
}
