package inmemory

import (
	"cmp"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/recvbuf"
)

type leaseState uint8

const (
	leaseActive leaseState = iota
	leaseAcked
	leaseNacked
	leaseExpired
	leaseDeadLettered
)

// lease is one delivery of an entry to a member of a group. *lease is the
// AckID the backend hands out: each delivery gets a lease of its own, so
// an id from an earlier delivery of the same entry is recognised as stale.
// Its fields are guarded by the topic lock. Its group is q's.
type lease struct {
	e        *entry
	q        *leaseQueue
	deadline int64 // broker clock
	attempt  int32
	state    leaseState
	// chain links the deliveries of one entry to one group after a lease
	// expired, so that a late Ack of the expired delivery can still settle
	// the message (see Subscription.Ack). Nil until the first expiry.
	chain *leaseChain
}

// group is the group the lease was granted for.
func (l *lease) group() *group { return l.q.g }

// leaseChain is what the deliveries of one entry to one group share once a
// lease has expired: whether the message is settled for the group, and the
// newest delivery.
type leaseChain struct {
	settled bool
	cur     *lease
}

// leaseRec is a run of leases granted together with one deadline (those
// of one take, or one extended lease), as queued for expiry: one record
// per Receive rather than one per lease. A lease of the run is stale when
// it was settled or extended (its deadline moved) since it was queued,
// and stays so: next is the first of the run not yet found stale.
type leaseRec struct {
	ls       []lease
	deadline int64
	next     int
}

func (r *leaseRec) stale(l *lease) bool { return l.state != leaseActive || l.deadline != r.deadline }

// live returns the first lease of the run that is not stale, passing the
// stale ones for good, or nil when every one is.
func (r *leaseRec) live() *lease {
	for ; r.next < len(r.ls); r.next++ {
		if l := &r.ls[r.next]; !r.stale(l) {
			return l
		}
	}
	return nil
}

// leaseQueue holds the leases a group granted with one ack timeout. As the
// broker clock only moves forward, the deadlines are queued in order and
// the next one to expire is always at the front: no timer per message and
// no heap on the hot path.
type leaseQueue struct {
	g       *group
	timeout time.Duration
	recs    fifo[leaseRec]
}

// redo is an entry ready to be delivered again to its group.
type redo struct {
	e       *entry
	attempt int32
	chain   *leaseChain // set when the redelivery follows an expired lease
}

// group is a consumer group: a cursor into the topic log plus the state of
// the entries it has received and not settled. Every field is guarded by
// the topic lock.
type group struct {
	t      *topic
	name   string
	cursor uint64 // next offset to deliver for the first time

	ready   fifo[redo] // redeliveries due now, oldest first
	expired []redo     // reap's buffer
	delayed delayHeap  // nacked with a delay
	seq     uint64
	queues  []*leaseQueue

	members int
	// deleted is set when DeleteGroup removed the group from its topic.
	deleted bool

	// wakeCh is closed, and reset, to wake the members blocked in Receive;
	// wakeAt is the earliest time one of them plans to wake up on its own.
	wakeCh chan struct{}
	wakeAt int64
	// sleepers counts the members blocked in Receive.
	sleepers int
}

func newGroup(t *topic, name string) *group {
	return &group{t: t, name: name, wakeAt: math.MaxInt64}
}

// queue returns the lease queue for timeout, creating it.
func (g *group) queue(timeout time.Duration) *leaseQueue {
	for _, q := range g.queues {
		if q.timeout == timeout {
			return q
		}
	}
	q := &leaseQueue{g: g, timeout: timeout}
	g.queues = append(g.queues, q)
	return q
}

// notify wakes every member blocked in Receive.
func (g *group) notify() {
	if g.wakeCh != nil {
		close(g.wakeCh)
		g.wakeCh = nil
		g.wakeAt = math.MaxInt64
	}
}

// notifyBefore wakes blocked members when at is earlier than they planned
// to wake up, so they can reschedule.
func (g *group) notifyBefore(at int64) {
	if g.wakeCh != nil && at < g.wakeAt {
		g.notify()
	}
}

// waitCh returns the channel a member blocks on until it plans to wake at
// at. A planned wake-up already past (now) is stale: its member woke on its
// timer, not on the channel, so it no longer holds back notifyBefore.
func (g *group) waitCh(at, now int64) <-chan struct{} {
	if g.wakeCh == nil {
		g.wakeCh = make(chan struct{})
	}
	if g.wakeAt <= now {
		g.wakeAt = at
	} else {
		g.wakeAt = min(g.wakeAt, at)
	}
	return g.wakeCh
}

// trim drops settled and extended leases from the queue fronts.
func (g *group) trim() {
	for _, q := range g.queues {
		for q.recs.len() > 0 && q.recs.front().live() == nil {
			q.recs.pop()
		}
	}
}

// reap makes expired leases and due delayed nacks ready for redelivery.
// The leases that expired since the last reap are redelivered in log
// order, whatever order their last extensions left them in: a member that
// takes over from one that stopped gets the keys' heads first.
func (g *group) reap(now int64) {
	expired := g.expired[:0]
	for _, q := range g.queues {
		for q.recs.len() > 0 {
			r := q.recs.front()
			for l := r.live(); l != nil && r.deadline <= now; l = r.live() {
				l.state = leaseExpired
				if l.chain == nil {
					l.chain = &leaseChain{}
				}
				expired = append(expired, redo{e: l.e, attempt: l.attempt + 1, chain: l.chain})
			}
			if r.next < len(r.ls) {
				break // a lease not due yet
			}
			q.recs.pop()
		}
	}
	slices.SortFunc(expired, func(a, b redo) int { return cmp.Compare(a.e.off, b.e.off) })
	for _, r := range expired {
		g.ready.push(r)
	}
	clear(expired)
	g.expired = expired[:0]
	for len(g.delayed) > 0 && g.delayed[0].due <= now {
		d := g.delayed.pop()
		g.ready.push(redo{e: d.e, attempt: d.attempt, chain: d.chain})
	}
}

// nextWake returns when the next lease expires or the next delayed nack
// is due (math.MaxInt64 when none). Call it after reap.
func (g *group) nextWake() int64 {
	next := int64(math.MaxInt64)
	for _, q := range g.queues {
		if q.recs.len() > 0 {
			next = min(next, q.recs.front().deadline)
		}
	}
	if len(g.delayed) > 0 {
		next = min(next, g.delayed[0].due)
	}
	return next
}

// schedule queues e for redelivery with attempt at due.
func (g *group) schedule(due int64, e *entry, attempt int32, chain *leaseChain) {
	g.seq++
	g.delayed.push(delayed{due: due, seq: g.seq, e: e, attempt: attempt, chain: chain})
	g.notifyBefore(due)
}

// pending reports whether the group has entries it could deliver now.
func (g *group) pending() bool { return g.ready.len() > 0 || g.cursor < g.t.head }

// take delivers up to max entries under leases of q: redeliveries first,
// then new entries in log order. The leases of one call share one
// allocation (they are the AckIDs, which outlive the call); the messages
// live in buf until the next call.
func (g *group) take(max int, now int64, q *leaseQueue, buf *recvbuf.Buffer) []*backend.Message {
	n := min(max, g.ready.len()+int(g.t.head-g.cursor))
	if n <= 0 {
		return nil
	}
	leases := make([]lease, n)
	ms, out := buf.Overwrite(n) // the loop sets every field of each message
	deadline := now + int64(q.timeout)
	t := g.t
	for len(out) < n && (g.ready.len() > 0 || g.cursor < t.head) {
		// Redeliveries first, then new entries in log order, each
		// delivered inline: no call per message.
		var e *entry
		attempt := int32(1)
		var chain *leaseChain
		if g.ready.len() > 0 {
			r := g.ready.pop()
			if r.chain != nil && r.chain.settled {
				continue // a late Ack of an expired delivery settled it
			}
			e, attempt, chain = r.e, r.attempt, r.chain
		} else {
			e = t.at(g.cursor)
			g.cursor++
			if e == nil {
				// Freed before this group existed (StartOldest skips it).
				continue
			}
		}
		i := len(out)
		l := &leases[i]
		l.e, l.q, l.deadline, l.attempt = e, q, deadline, attempt
		if chain != nil {
			l.chain, chain.cur = chain, l
		}
		var h map[string]string
		if len(e.headers()) > 0 {
			h = maps.Clone(e.headers())
		}
		// Field by field rather than ms[i] = backend.Message{...}: while
		// the collector marks, a whole-struct copy runs the write barrier
		// over every pointer word, the zero ones included.
		m := &ms[i]
		m.ID, m.Payload, m.AckID = e.id, e.payload, l
		if k := e.key(); m.Key != "" || k != "" {
			m.Key = k
		}
		if m.Headers != nil || h != nil {
			m.Headers = h
		}
		m.PublishedAt, m.Attempt = time.Unix(0, e.published), int(attempt)
		if out = out[:i+1]; out[i] != m { // a reused buffer has it already
			out[i] = m
		}
	}
	if len(out) > 0 {
		q.recs.push(leaseRec{ls: leases[:len(out)], deadline: deadline})
		g.notifyBefore(deadline)
	}
	if g.pending() {
		g.notify()
	}
	return out
}
