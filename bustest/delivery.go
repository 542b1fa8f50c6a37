package bustest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/middleware"
)

// setupTimeout bounds how long NewDelivery waits for its private bus.
const setupTimeout = 10 * time.Second

// Option configures NewDelivery.
type Option func(*config)

type config struct {
	topic       string
	group       string
	attempt     int
	publishedAt time.Time
	noDLQ       bool
	ackMode     bus.AckMode
	subOpts     []bus.SubscribeOption
}

// WithAckMode sets the ack mode of the subscription Run delivers through
// (default AckOnSuccess, as a subscription's). Give it here rather than
// through Subscribe: Run needs to know it.
func WithAckMode(m bus.AckMode) Option { return func(c *config) { c.ackMode = m } }

// Subscribe gives Run the options of the subscription under test (max
// deliveries, retry backoff, dead-letter topic, handler timeout,
// middleware ...), so that Run decides as that subscription would; the
// ack mode is WithAckMode's. The default is a subscription with the bus's
// defaults.
func Subscribe(opts ...bus.SubscribeOption) Option {
	return func(c *config) { c.subOpts = append(c.subOpts, opts...) }
}

// WithTopic sets Delivery.Topic (default "test").
func WithTopic(topic string) Option { return func(c *config) { c.topic = topic } }

// WithGroup sets Delivery.Group (default "default").
func WithGroup(group string) Option { return func(c *config) { c.group = group } }

// WithAttempt sets Delivery.Attempt (default 1).
func WithAttempt(n int) Option { return func(c *config) { c.attempt = n } }

// WithPublishedAt sets Delivery.PublishedAt (default: when NewDelivery ran).
func WithPublishedAt(t time.Time) Option { return func(c *config) { c.publishedAt = t } }

// WithoutDeadLetter turns dead-lettering off, so Reject drops the message
// (middleware.OutcomeDropped) as it does in a subscription without a dead-letter
// topic.
func WithoutDeadLetter() Option { return func(c *config) { c.noDLQ = true } }

// Delivery is a *bus.Delivery whose settlements are recorded. Its methods
// are safe for concurrent use.
type Delivery struct {
	*bus.Delivery
	rec *recorder
}

// T is the part of testing.TB that NewDelivery uses; *testing.T and
// *testing.B satisfy it.
type T interface {
	Helper()
	Cleanup(func())
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
}

var _ T = testing.TB(nil)

// NewDelivery returns a delivery of msg whose settlements are recorded. msg
// is copied; an empty ID gets a generated one, as Publish does. It fails
// the test when msg is invalid. When the test ends, a delivery still
// pending is released and the private bus is closed.
func NewDelivery(t T, msg *bus.Message, opts ...Option) *Delivery {
	t.Helper()
	cfg := config{topic: "test", group: "default", attempt: 1, publishedAt: time.Now()}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.attempt < 1 {
		t.Fatalf("bustest: attempt %d, want >= 1", cfg.attempt)
	}
	if msg == nil {
		t.Fatalf("bustest: nil message")
	}
	rec := &recorder{cfg: cfg}
	b := bus.New(rec)
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	var delivered *bus.Delivery
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
		defer cancel()
		if delivered != nil && middleware.OutcomeOf(delivered) == middleware.OutcomePending {
			// Release the slot so that Close need not wait for the lease;
			// the test has ended, so the record no longer matters.
			_ = delivered.Nack(ctx, 0)
		}
		if err := b.Close(ctx); err != nil && !errors.Is(err, bus.ErrClosed) {
			t.Errorf("bustest: close the private bus: %v", err)
		}
	})
	if err := b.Publish(ctx, cfg.topic, msg); err != nil {
		t.Fatalf("bustest: %v", err)
	}
	got := make(chan *bus.Delivery, 1)
	subOpts := []bus.SubscribeOption{
		bus.WithGroup(cfg.group), bus.WithAckMode(bus.AckManual), bus.WithAckTimeout(time.Hour),
	}
	if cfg.noDLQ {
		subOpts = append(subOpts, bus.WithDeadLetter(""))
	}
	_, err := b.Subscribe(ctx, cfg.topic, func(_ context.Context, d *bus.Delivery) error {
		got <- d
		return nil
	}, subOpts...)
	if err != nil {
		t.Fatalf("bustest: subscribe: %v", err)
	}
	select {
	case d := <-got:
		delivered = d
		return &Delivery{Delivery: d, rec: rec}
	case <-ctx.Done():
		t.Fatalf("bustest: the delivery did not arrive within %v", setupTimeout)
		return nil
	}
}

// Outcome is how the delivery was settled so far (middleware.OutcomePending if
// not yet).
func (d *Delivery) Outcome() middleware.Outcome { return middleware.OutcomeOf(d.Delivery) }

// NackDelay is the delay of the Nack that settled the delivery, and
// whether it was nacked.
func (d *Delivery) NackDelay() (time.Duration, bool) {
	d.rec.mu.Lock()
	defer d.rec.mu.Unlock()
	return d.rec.nackDelay, d.rec.nacked
}

// Snoozed reports whether the delivery was snoozed (Delivery.Snooze): a
// redelivery after NackDelay that does not count an attempt.
func (d *Delivery) Snoozed() bool {
	d.rec.mu.Lock()
	defer d.rec.mu.Unlock()
	return d.rec.snoozed
}

// RejectReason is the reason text of the Reject (or permanent failure)
// that dead-lettered the delivery, and whether it was dead-lettered. With
// WithoutDeadLetter a Reject drops the message instead and there is no
// reason to record.
func (d *Delivery) RejectReason() (string, bool) {
	d.rec.mu.Lock()
	defer d.rec.mu.Unlock()
	return d.rec.reason, d.rec.deadLettered
}

// DeadLetter is the copy the delivery was dead-lettered as, with its
// bus-dlq-* headers, or nil.
func (d *Delivery) DeadLetter() *bus.Message {
	d.rec.mu.Lock()
	defer d.rec.mu.Unlock()
	if d.rec.dead == nil {
		return nil
	}
	m := d.rec.dead
	return &bus.Message{ID: m.ID, Key: m.Key, Headers: maps.Clone(m.Headers), Payload: m.Payload}
}

// Extensions counts the successful Extend calls.
func (d *Delivery) Extensions() int {
	d.rec.mu.Lock()
	defer d.rec.mu.Unlock()
	return d.rec.extends
}

// String describes the recorded settlement, for test failure messages.
func (d *Delivery) String() string {
	delay, _ := d.NackDelay()
	reason, _ := d.RejectReason()
	return fmt.Sprintf("delivery %q: outcome %s, nack delay %v, reject reason %q, %d extensions",
		d.ID, d.Outcome(), delay, reason, d.Extensions())
}

// recorder is a one-message backend that records what the bus asks of it.
type recorder struct {
	cfg config
	// settled is closed at the first settlement the bus makes.
	settled   chan struct{}
	settledMu sync.Once

	mu           sync.Mutex
	msg          *backend.Message
	handedOut    bool
	acked        bool
	nacked       bool
	nackDelay    time.Duration
	snoozed      bool
	deadLettered bool
	reason       string
	code         backend.DeadLetterCode
	dead         *backend.Message
	extends      int
}

var (
	_ backend.Backend      = (*recorder)(nil)
	_ backend.Subscription = (*recSub)(nil)
	_ backend.Extender     = (*recSub)(nil)
	_ backend.DeadLetterer = (*recSub)(nil)
	_ backend.Snoozer      = (*recSub)(nil)
)

type ackID struct{}

func (r *recorder) Publish(_ context.Context, _ string, msgs []*backend.Message) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.msg != nil || len(msgs) != 1 {
		return errors.New("bustest: the recording backend holds one message")
	}
	m := msgs[0]
	r.msg = &backend.Message{
		ID: m.ID, Key: m.Key, Headers: maps.Clone(m.Headers), Payload: append([]byte(nil), m.Payload...),
		PublishedAt: r.cfg.publishedAt, AckID: ackID{}, Attempt: r.cfg.attempt,
	}
	return nil
}

func (r *recorder) Subscribe(context.Context, string, backend.SubscribeConfig) (backend.Subscription, error) {
	return &recSub{r: r, closed: make(chan struct{})}, nil
}

func (r *recorder) Capabilities() backend.Capabilities {
	return backend.Capabilities{Name: "bustest", ConsumerGroups: true, Redelivery: true, NackDelay: true, Extend: true}
}

func (r *recorder) Close() error { return nil }

type recSub struct {
	r         *recorder
	closeOnce sync.Once
	closed    chan struct{}
}

// Receive hands out the message once, then waits for ctx or Close.
func (s *recSub) Receive(ctx context.Context, _ int) ([]*backend.Message, error) {
	s.r.mu.Lock()
	if !s.r.handedOut && s.r.msg != nil {
		s.r.handedOut = true
		m := s.r.msg
		s.r.mu.Unlock()
		return []*backend.Message{m}, nil
	}
	s.r.mu.Unlock()
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-s.closed:
		return nil, backend.ErrClosed
	case <-t.C:
		return nil, nil
	}
}

// settle records that the bus settled the message.
func (r *recorder) settle() {
	if r.settled != nil {
		r.settledMu.Do(func() { close(r.settled) })
	}
}

func (s *recSub) Ack(context.Context, []backend.AckID) error {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	s.r.acked = true
	s.r.settle()
	return nil
}

func (s *recSub) Nack(_ context.Context, _ backend.AckID, delay time.Duration) error {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	s.r.nacked, s.r.nackDelay = true, delay
	s.r.settle()
	return nil
}

func (s *recSub) Snooze(_ context.Context, _ backend.AckID, delay time.Duration) error {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	s.r.nacked, s.r.nackDelay, s.r.snoozed = true, delay, true
	s.r.settle()
	return nil
}

func (s *recSub) Extend(context.Context, backend.AckID) error {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	s.r.extends++
	return nil
}

func (s *recSub) DeadLetter(_ context.Context, _ backend.AckID, _ string, msg *backend.Message) error {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	s.r.deadLettered = true
	s.r.reason = msg.Headers[backend.HeaderDeadLetterReason]
	s.r.code = backend.DeadLetterCode(msg.Headers[backend.HeaderDeadLetterCode])
	s.r.settle()
	s.r.dead = &backend.Message{ID: msg.ID, Key: msg.Key, Headers: maps.Clone(msg.Headers), Payload: append([]byte(nil), msg.Payload...)}
	return nil
}

func (s *recSub) Close() error {
	s.closeOnce.Do(func() { close(s.closed) })
	return nil
}
