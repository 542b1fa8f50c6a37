package nats

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/observer"
)

// coreWait is how long Receive waits for the first message in core mode.
const coreWait = time.Second

// Pending limits of a core subscription: core NATS pushes, so messages
// the handlers cannot keep up with wait here, and beyond the limits the
// client drops them (reported as a slow consumer).
const (
	corePendingMsgs  = 65536
	corePendingBytes = 64 << 20
)

// coreAckID marks a core delivery; there is nothing to settle.
type coreAckID struct{}

// coreSub is one member of a queue group.
type coreSub struct {
	b     *Backend
	topic string
	cfg   backend.SubscribeConfig
	sub   *natsgo.Subscription

	closeOnce sync.Once
	closed    chan struct{}
}

func (b *Backend) subscribeCore(topic string, cfg backend.SubscribeConfig) (*coreSub, error) {
	sub, err := b.nc.QueueSubscribeSync(b.subjectFor(topic), cfg.Group)
	if err != nil {
		return nil, fmt.Errorf("queue subscribe: %w", err)
	}
	if err := sub.SetPendingLimits(corePendingMsgs, corePendingBytes); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("queue subscribe: %w", err)
	}
	// Make sure the server knows the subscription before Subscribe
	// returns, so a Publish right after it is delivered.
	if err := b.nc.Flush(); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("queue subscribe: %w", err)
	}
	s := &coreSub{b: b, topic: topic, cfg: cfg, sub: sub, closed: make(chan struct{})}
	b.track(s)
	return s, nil
}

func (s *coreSub) connectionEvent(err error) {
	s.cfg.Observer.Observe(context.Background(), observer.Event{Scope: observer.ScopeConnection, Topic: s.topic, Group: s.cfg.Group, Err: err})
}

// Receive implements backend.Subscription: it waits up to a second for
// the first message, then takes what else is buffered, up to max.
func (s *coreSub) Receive(ctx context.Context, max int) ([]*backend.Message, error) {
	if s.isClosed() || s.b.closed.Load() {
		return nil, fmt.Errorf("nats: receive %q: %w", s.topic, backend.ErrClosed)
	}
	wctx, cancel := context.WithTimeout(ctx, coreWait)
	defer cancel()
	msg, err := s.sub.NextMsgWithContext(wctx)
	if err != nil {
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case wctx.Err() != nil:
			return nil, nil
		case errors.Is(err, natsgo.ErrBadSubscription) || errors.Is(err, natsgo.ErrConnectionClosed) || s.b.closed.Load() || s.isClosed():
			return nil, fmt.Errorf("nats: receive %q: %w", s.topic, backend.ErrClosed)
		case errors.Is(err, natsgo.ErrSlowConsumer):
			// Messages were dropped; the subscription goes on.
			return nil, fmt.Errorf("nats: receive %q: messages dropped: %w", s.topic, err)
		default:
			return nil, fmt.Errorf("nats: receive %q: %w", s.topic, err)
		}
	}
	out := make([]*backend.Message, 0, min(max, 16))
	out = append(out, s.decode(msg))
	for len(out) < max {
		msg, err := s.sub.NextMsg(0)
		if err != nil {
			break
		}
		out = append(out, s.decode(msg))
	}
	return out, nil
}

func (s *coreSub) decode(msg *natsgo.Msg) *backend.Message {
	m := &backend.Message{Payload: msg.Data, AckID: coreAckID{}, Attempt: 1}
	decodeHeaders(msg.Header, m, "")
	if m.PublishedAt.IsZero() {
		m.PublishedAt = time.Now()
	}
	return m
}

// Ack implements backend.Subscription; core NATS has nothing to settle.
func (s *coreSub) Ack(context.Context, []backend.AckID) error { return nil }

// Nack implements backend.Subscription. Core NATS cannot redeliver; the
// bus does not call Nack on a backend without Redelivery.
func (s *coreSub) Nack(context.Context, backend.AckID, time.Duration) error {
	return fmt.Errorf("nats: nack %q: core NATS cannot redeliver", s.topic)
}

// Close implements backend.Subscription. Messages buffered for this
// member are dropped (at-most-once).
func (s *coreSub) Close() error {
	return s.b.closeSub(s, &s.closeOnce, s.closed, s.sub, s.topic)
}

func (s *coreSub) isClosed() bool { return isDone(s.closed) }

// isDone reports whether ch is closed.
func isDone(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
