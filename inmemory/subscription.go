package inmemory

import (
	"context"
	"fmt"
	"math"
	"time"
	"unsafe"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/recvbuf"
)

// maxReceiveWait bounds how long Receive blocks without a message.
const maxReceiveWait = time.Second

// Subscription is one member of a consumer group. Receive is called from
// one goroutine at a time; Ack, Nack, Extend, DeadLetter and Close are
// safe for concurrent use with each other and with Receive.
type Subscription struct {
	b     *Backend
	t     *topic
	g     *group
	q     *leaseQueue
	timer *time.Timer    // used by Receive only
	buf   recvbuf.Buffer // messages of the last Receive, reused by the next

	closed bool          // guarded by t.mu
	done   chan struct{} // closed by Close
}

// Receive returns up to max messages: redeliveries that are due first,
// then new entries in publish order. Each starts a lease of the
// subscription's ack timeout. With nothing to deliver it blocks until an
// entry arrives, a lease expires, a delayed nack is due, ctx ends or the
// subscription closes, for at most about a second.
func (s *Subscription) Receive(ctx context.Context, max int) ([]*backend.Message, error) {
	if max < 1 {
		return nil, fmt.Errorf("inmemory: receive %q: %w: max %d", s.t.name, ErrInvalidOption, max)
	}
	t, g := s.t, s.g
	var deadline int64
	slept := false
	for {
		if err := ctx.Err(); err != nil {
			return s.wokeAndLeft(slept, err)
		}
		t.lock()
		if slept {
			g.sleepers--
			slept = false
		}
		if s.closed || s.b.closed.Load() {
			t.unlock()
			return nil, errClosed("receive", t.name)
		}
		if g.deleted {
			t.unlock()
			return nil, backend.Permanent(fmt.Errorf("inmemory: receive %q: the group %q was deleted", t.name, g.name))
		}
		now := t.b.now()
		if deadline == 0 {
			deadline = now + int64(maxReceiveWait)
		}
		g.reap(now)
		if msgs := g.take(max, now, s.q, &s.buf); len(msgs) > 0 {
			t.unlock()
			return msgs, nil
		}
		if now >= deadline {
			t.unlock()
			return nil, nil
		}
		wake := min(deadline, g.nextWake())
		ch := g.waitCh(wake, now)
		g.sleepers++
		slept = true
		t.unlock()

		s.timer.Reset(time.Duration(wake - now))
		select {
		case <-ch:
		case <-s.timer.C:
		case <-ctx.Done():
		case <-s.done:
		case <-s.b.done:
		}
		s.timer.Stop()
	}
}

// wokeAndLeft ends a Receive whose ctx ended: a member that slept is no
// longer blocked on the group.
func (s *Subscription) wokeAndLeft(slept bool, err error) ([]*backend.Message, error) {
	if slept {
		s.t.lock()
		s.g.sleepers--
		s.t.unlock()
	}
	return nil, err
}

// leaseOf returns the lease id stands for if it is an active lease on
// this subscription's topic.
func (s *Subscription) leaseOf(id backend.AckID) *lease {
	l := s.anyLease(id)
	if l == nil || l.state != leaseActive {
		return nil
	}
	return l
}

// anyLease returns the lease id stands for on this topic, whatever its
// state.
func (s *Subscription) anyLease(id backend.AckID) *lease {
	l, ok := id.(*lease)
	if !ok || l == nil || l.q.g.t != s.t {
		return nil
	}
	return l
}

// staleErr is the error of Nack, Extend and DeadLetter for an id that is
// not an active lease.
func (s *Subscription) staleErr(op string, id backend.AckID) error {
	if s.anyLease(id) == nil {
		return fmt.Errorf("inmemory: %s %q: ack id %T is not a delivery of this topic", op, s.t.name, id)
	}
	return fmt.Errorf("inmemory: %s %q: the lease ran out: %w", op, s.t.name, backend.ErrStale)
}

// Ack settles the deliveries for their group. Acking an id twice, or an
// unknown id, does nothing. An Ack of a delivery whose lease ran out still
// settles the message if the group has not settled it since: a newer
// delivery of it is settled with it (its own settlements then fail with
// ErrStale), and a redelivery not handed out yet is dropped.
func (s *Subscription) Ack(ctx context.Context, ids []backend.AckID) error {
	if s.b.closed.Load() {
		return errClosed("ack", s.t.name)
	}
	t := s.t
	t.lock()
	var other *group
	atBase := false // an entry at base was freed: advance
	for _, id := range ids {
		l := s.anyLease(id)
		if l == nil {
			continue
		}
		switch {
		case l.state == leaseActive:
			l.state = leaseAcked
			if l.chain != nil {
				l.chain.settled = true
			}
		case l.state == leaseExpired && l.chain != nil && !l.chain.settled:
			l.chain.settled = true
			if cur := l.chain.cur; cur != nil && cur.state == leaseActive {
				cur.state = leaseAcked
			}
		default:
			continue
		}
		if t.settleAt(l.e) {
			atBase = true
		}
		if g := l.group(); g != s.g {
			other = g
		}
	}
	if atBase {
		t.advance()
	}
	s.g.trim()
	if other != nil {
		other.trim()
	}
	t.unlock()
	return nil
}

// Nack ends the lease and makes the entry available to the group again
// after delay (at once when delay <= 0) with Attempt+1. A stale id (its
// lease ended) returns an error wrapping backend.ErrStale and changes
// nothing.
func (s *Subscription) Nack(ctx context.Context, id backend.AckID, delay time.Duration) error {
	return s.giveBack("nack", id, delay, 1)
}

// giveBack ends the lease of id and makes its entry available to the
// group again after delay, with Attempt grown by count (1 for a nack, 0
// for a release or a snooze).
func (s *Subscription) giveBack(op string, id backend.AckID, delay time.Duration, count int32) error {
	if s.b.closed.Load() {
		return errClosed(op, s.t.name)
	}
	t := s.t
	t.lock()
	defer t.unlock()
	l := s.leaseOf(id)
	if l == nil {
		return s.staleErr(op, id)
	}
	l.state = leaseNacked
	g := l.group()
	if delay <= 0 {
		g.ready.push(redo{e: l.e, attempt: l.attempt + count, chain: l.chain})
		g.notify()
	} else {
		now := t.b.now()
		g.schedule(now+min(int64(delay), math.MaxInt64-now), l.e, l.attempt+count, l.chain)
	}
	g.trim()
	return nil
}

// Extend restarts the lease of an active delivery with the ack timeout it
// was received with. A stale id returns an error wrapping
// backend.ErrStale.
func (s *Subscription) Extend(ctx context.Context, id backend.AckID) error {
	if s.b.closed.Load() {
		return errClosed("extend", s.t.name)
	}
	t := s.t
	t.lock()
	defer t.unlock()
	l := s.leaseOf(id)
	if l == nil {
		return s.staleErr("extend", id)
	}
	l.deadline = t.b.now() + int64(l.q.timeout)
	l.q.recs.push(leaseRec{ls: unsafe.Slice(l, 1), deadline: l.deadline})
	l.group().trim()
	return nil
}

// DeadLetter appends msg to topic and settles the delivery in one step
// under the locks of both topics. A stale id returns an error wrapping
// backend.ErrStale and writes nothing. The
// dead-letter topic's backlog limit applies as for Publish.
func (s *Subscription) DeadLetter(ctx context.Context, id backend.AckID, topic string, msg *backend.Message) error {
	if s.b.closed.Load() {
		return errClosed("dead-letter", s.t.name)
	}
	if msg == nil {
		return fmt.Errorf("inmemory: dead-letter %q: nil message", s.t.name)
	}
	dl := s.b.br.topic(topic)
	if dl == nil {
		return errClosed("dead-letter", s.t.name)
	}
	es, bytes := s.b.br.copyEntries([]*backend.Message{msg})
	t, opts := s.t, s.b.br.opts
	if bytes > opts.MaxBacklogBytes {
		return fmt.Errorf("inmemory: dead-letter %q to %q: %w: message of %d bytes is larger than max backlog bytes %d", t.name, topic, ErrBacklogFull, bytes, opts.MaxBacklogBytes)
	}
	for {
		unlock := lockPair(t, dl)
		l := s.leaseOf(id)
		switch {
		case l == nil:
			unlock()
			return s.staleErr("dead-letter", id)
		case s.b.closed.Load():
			unlock()
			return errClosed("dead-letter", t.name)
		case dl.admit(1, bytes, len(dl.glist) > 0):
			dl.insert(es)
			l.state = leaseDeadLettered
			if l.chain != nil {
				l.chain.settled = true
			}
			t.settle(l.e)
			l.group().trim()
			unlock()
			return nil
		case opts.BacklogPolicy == BacklogError:
			err := dl.fullError()
			unlock()
			return fmt.Errorf("inmemory: dead-letter %q to %q: %w", t.name, topic, err)
		}
		ch := dl.waitSpace(1, bytes)
		unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("inmemory: dead-letter %q to %q: waiting for backlog room: %w", t.name, topic, ctx.Err())
		case <-s.b.done:
			return errClosed("dead-letter", t.name)
		}
	}
}

// lockPair locks a and b in name order (once when they are the same) and
// returns the unlock function.
func lockPair(a, b *topic) func() {
	if a == b {
		a.lock()
		return a.unlock
	}
	if b.name < a.name {
		a, b = b, a
	}
	a.lock()
	b.lock()
	return func() {
		b.unlock()
		a.unlock()
	}
}

// Close leaves the group. A Receive in progress returns at once. Entries
// this member received and did not settle stay leased and are redelivered
// to the group when their leases expire. Closing twice returns nil.
func (s *Subscription) Close() error {
	s.t.lock()
	defer s.t.unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.g.members--
	close(s.done)
	return nil
}
