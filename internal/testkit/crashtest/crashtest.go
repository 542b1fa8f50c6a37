// Package crashtest gives tests a member's view of a shared backend that
// can be killed: after Crash every call the member makes fails, as for a
// process that was killed, so its leases and group locks lapse and
// nothing it holds is settled, while the other members go on.
package crashtest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eventbus-go/bus/backend"
)

// ErrCrashed is what a crashed member's calls return.
var ErrCrashed = errors.New("crashtest: member crashed")

// Target is what a member forwards to: a backend with group locks,
// partitions and inspection, the needs of key-ordered and partitioned
// members.
type Target interface {
	backend.Backend
	backend.GroupLocker
	backend.Partitioner
	backend.Inspector
}

// Member is one member's view of a shared Target. Close leaves the
// target open for the other members.
type Member struct {
	Target
	dead atomic.Bool
	// receiving counts the Receives under way at the target.
	receiving atomic.Int32
	// stuck holds what KeepOnLease set: the message ID whose deliveries
	// cannot go back, and the ack IDs of those received.
	stuck struct {
		sync.Mutex
		id   string
		acks []backend.AckID
	}
}

// New returns a live member of t.
func New(t Target) *Member { return &Member{Target: t} }

// Crash kills the member: every call it makes from now on fails.
func (m *Member) Crash() { m.dead.Store(true) }

// Fetching reports whether a Receive the member started before it
// crashed is still under way at the target: as for a fetch a killed
// process had under way at the broker, what it is handed is leased to
// the dead member. Once Crash was called and Fetching reports false, the
// member fetches nothing more.
func (m *Member) Fetching() bool { return m.receiving.Load() > 0 }

// KeepOnLease makes the deliveries of the message with this ID, received
// from now on, impossible to give back: their Release and Nack fail, as
// over a link that drops, so they stay pending on their leases. The
// member's other calls go on.
func (m *Member) KeepOnLease(id string) {
	m.stuck.Lock()
	m.stuck.id = id
	m.stuck.Unlock()
}

// errKept is what a Release or Nack of a kept delivery returns.
var errKept = errors.New("crashtest: give back: connection lost")

// noted records the ack IDs of received deliveries that KeepOnLease
// keeps.
func (m *Member) noted(msgs []*backend.Message) {
	m.stuck.Lock()
	defer m.stuck.Unlock()
	for _, msg := range msgs {
		if m.stuck.id != "" && msg.ID == m.stuck.id {
			m.stuck.acks = append(m.stuck.acks, msg.AckID)
		}
	}
}

// kept reports whether the delivery of id cannot be given back.
func (m *Member) kept(id backend.AckID) bool {
	m.stuck.Lock()
	defer m.stuck.Unlock()
	for _, a := range m.stuck.acks {
		if reflect.DeepEqual(a, id) {
			return true
		}
	}
	return false
}

// Dead reports whether Crash was called.
func (m *Member) Dead() bool { return m.dead.Load() }

func (m *Member) Publish(ctx context.Context, topic string, msgs []*backend.Message) error {
	if m.Dead() {
		return ErrCrashed
	}
	return m.Target.Publish(ctx, topic, msgs)
}

func (m *Member) Subscribe(ctx context.Context, topic string, cfg backend.SubscribeConfig) (backend.Subscription, error) {
	sub, err := m.Target.Subscribe(ctx, topic, cfg)
	if err != nil {
		return nil, err
	}
	return &subscription{Subscription: sub, m: m}, nil
}

func (m *Member) LockGroup(ctx context.Context, topic, group, holder string, ttl time.Duration) (bool, bool, error) {
	if m.Dead() {
		return false, false, ErrCrashed
	}
	return m.Target.LockGroup(ctx, topic, group, holder, ttl)
}

func (m *Member) UnlockGroup(ctx context.Context, topic, group, holder string) error {
	if m.Dead() {
		return ErrCrashed
	}
	return m.Target.UnlockGroup(ctx, topic, group, holder)
}

// Heartbeat stops when the member crashes, as a killed process's would.
func (m *Member) Heartbeat(ctx context.Context, topic, group, member string, ttl time.Duration) ([]string, error) {
	if m.Dead() {
		return nil, ErrCrashed
	}
	return m.Target.Heartbeat(ctx, topic, group, member, ttl)
}

func (m *Member) Leave(ctx context.Context, topic, group, member string) error {
	if m.Dead() {
		return ErrCrashed
	}
	return m.Target.Leave(ctx, topic, group, member)
}

// DeleteGroup forwards to the target's GroupDeleter, when it has one.
func (m *Member) DeleteGroup(ctx context.Context, topic, group string) error {
	d, ok := m.Target.(backend.GroupDeleter)
	switch {
	case m.Dead():
		return ErrCrashed
	case !ok:
		return fmt.Errorf("crashtest: %w: the target is no backend.GroupDeleter", backend.ErrUnsupported)
	}
	return d.DeleteGroup(ctx, topic, group)
}

// Close leaves the shared target open for the other members.
func (m *Member) Close() error { return nil }

type subscription struct {
	backend.Subscription
	m *Member
}

func (s *subscription) Receive(ctx context.Context, max int) ([]*backend.Message, error) {
	if s.m.Dead() {
		<-ctx.Done() // a dead member fetches nothing
		return nil, ctx.Err()
	}
	s.m.receiving.Add(1)
	defer s.m.receiving.Add(-1)
	msgs, err := s.Subscription.Receive(ctx, max)
	s.m.noted(msgs)
	return msgs, err
}

func (s *subscription) Ack(ctx context.Context, ids []backend.AckID) error {
	if s.m.Dead() {
		return ErrCrashed
	}
	return s.Subscription.Ack(ctx, ids)
}

func (s *subscription) Nack(ctx context.Context, id backend.AckID, delay time.Duration) error {
	switch {
	case s.m.Dead():
		return ErrCrashed
	case s.m.kept(id):
		return errKept
	}
	return s.Subscription.Nack(ctx, id, delay)
}

// Extend forwards to the subscription's Extender, when it has one.
func (s *subscription) Extend(ctx context.Context, id backend.AckID) error {
	x, ok := s.Subscription.(backend.Extender)
	switch {
	case s.m.Dead():
		return ErrCrashed
	case !ok:
		return fmt.Errorf("crashtest: %w: the subscription is no backend.Extender", backend.ErrUnsupported)
	}
	return x.Extend(ctx, id)
}

// Release forwards to the subscription's Releaser, or nacks without a
// delay.
func (s *subscription) Release(ctx context.Context, id backend.AckID) error {
	switch {
	case s.m.Dead():
		return ErrCrashed
	case s.m.kept(id):
		return errKept
	}
	if r, ok := s.Subscription.(backend.Releaser); ok {
		return r.Release(ctx, id)
	}
	return s.Subscription.Nack(ctx, id, 0)
}

// Coming forwards to the subscription's PartialReceiver: 0 without one.
func (s *subscription) Coming() int {
	if p, ok := s.Subscription.(backend.PartialReceiver); ok {
		return p.Coming()
	}
	return 0
}

// PendingDeliveries forwards to the subscription's PendingLister.
func (s *subscription) PendingDeliveries(ctx context.Context, max int) ([]backend.Pending, bool, error) {
	x, ok := s.Subscription.(backend.PendingLister)
	switch {
	case s.m.Dead():
		return nil, false, ErrCrashed
	case !ok:
		return nil, false, fmt.Errorf("crashtest: %w: the subscription is no backend.PendingLister", backend.ErrUnsupported)
	}
	return x.PendingDeliveries(ctx, max)
}
