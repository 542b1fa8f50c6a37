// Package recorder is a one-message backend that records what the bus
// asks of it: the backend under package bustest, which builds real
// deliveries on it without its users importing package backend.
package recorder

import (
	"context"
	"errors"
	"maps"
	"sync"
	"time"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
)

// Record is what the bus asked of the backend so far.
type Record struct {
	Acked        bool
	Nacked       bool          // by Nack or Snooze
	NackDelay    time.Duration // of the Nack or Snooze
	Snoozed      bool
	DeadLettered bool
	Reason       string             // of the dead letter
	Code         bus.DeadLetterCode // of the dead letter
	Dead         *bus.Message       // the dead-letter copy, with its headers
	Extends      int
}

// Backend holds one message, hands it out once and records its
// settlements. It is safe for concurrent use.
type Backend struct {
	publishedAt time.Time
	attempt     int
	settled     chan struct{}
	settledOnce sync.Once

	mu        sync.Mutex
	msg       *backend.Message
	handedOut bool
	rec       Record
}

var (
	_ bus.Backend          = (*Backend)(nil)
	_ backend.Subscription = (*sub)(nil)
	_ backend.Extender     = (*sub)(nil)
	_ backend.DeadLetterer = (*sub)(nil)
	_ backend.Snoozer      = (*sub)(nil)
)

// New returns a backend whose message is delivered as attempt, published
// at publishedAt.
func New(publishedAt time.Time, attempt int) *Backend {
	return &Backend{publishedAt: publishedAt, attempt: attempt, settled: make(chan struct{})}
}

// Settled is closed at the first settlement the bus makes (Ack, Nack,
// Snooze or DeadLetter).
func (r *Backend) Settled() <-chan struct{} { return r.settled }

// Record returns a copy of what was recorded.
func (r *Backend) Record() Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec := r.rec
	if d := rec.Dead; d != nil {
		rec.Dead = &bus.Message{ID: d.ID, Key: d.Key, Headers: maps.Clone(d.Headers), Payload: d.Payload}
	}
	return rec
}

type ackID struct{}

// Publish stores the one message.
func (r *Backend) Publish(_ context.Context, _ string, msgs []*backend.Message) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.msg != nil || len(msgs) != 1 {
		return errors.New("bustest: the recording backend holds one message")
	}
	m := msgs[0]
	r.msg = &backend.Message{
		ID: m.ID, Key: m.Key, Headers: maps.Clone(m.Headers), Payload: append([]byte(nil), m.Payload...),
		PublishedAt: r.publishedAt, AckID: ackID{}, Attempt: r.attempt,
	}
	return nil
}

// Subscribe returns a subscription that hands out the message.
func (r *Backend) Subscribe(context.Context, string, backend.SubscribeConfig) (backend.Subscription, error) {
	return &sub{r: r, closed: make(chan struct{})}, nil
}

// Capabilities are those of a backend with groups, redelivery, nack
// delays and lease extension.
func (r *Backend) Capabilities() bus.Capabilities {
	return bus.Capabilities{Name: "bustest", ConsumerGroups: true, Redelivery: true, NackDelay: true, Extend: true}
}

// Close does nothing.
func (r *Backend) Close() error { return nil }

// settle records that the bus settled the message; r.mu is held.
func (r *Backend) settle() { r.settledOnce.Do(func() { close(r.settled) }) }

type sub struct {
	r         *Backend
	closeOnce sync.Once
	closed    chan struct{}
}

// Receive hands out the message once, then waits for ctx or Close.
func (s *sub) Receive(ctx context.Context, _ int) ([]*backend.Message, error) {
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

func (s *sub) Ack(context.Context, []backend.AckID) error {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	s.r.rec.Acked = true
	s.r.settle()
	return nil
}

func (s *sub) Nack(_ context.Context, _ backend.AckID, delay time.Duration) error {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	s.r.rec.Nacked, s.r.rec.NackDelay = true, delay
	s.r.settle()
	return nil
}

func (s *sub) Snooze(_ context.Context, _ backend.AckID, delay time.Duration) error {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	s.r.rec.Nacked, s.r.rec.NackDelay, s.r.rec.Snoozed = true, delay, true
	s.r.settle()
	return nil
}

func (s *sub) Extend(context.Context, backend.AckID) error {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	s.r.rec.Extends++
	return nil
}

func (s *sub) DeadLetter(_ context.Context, _ backend.AckID, _ string, msg *backend.Message) error {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	s.r.rec.DeadLettered = true
	s.r.rec.Reason = msg.Headers[bus.HeaderDeadLetterReason]
	s.r.rec.Code = bus.DeadLetterCode(msg.Headers[bus.HeaderDeadLetterCode])
	s.r.rec.Dead = &bus.Message{ID: msg.ID, Key: msg.Key, Headers: maps.Clone(msg.Headers), Payload: append([]byte(nil), msg.Payload...)}
	s.r.settle()
	return nil
}

func (s *sub) Close() error {
	s.closeOnce.Do(func() { close(s.closed) })
	return nil
}
