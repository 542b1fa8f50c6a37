package inmemory

import (
	"maps"
	"sync"
	"time"

	"github.com/eventbus-go/bus/backend"
)

// entry is one published message in a topic log. Its fields are written
// once by Publish and then only read, except refs and the release of the
// message data, which happen under the topic lock.
type entry struct {
	off       uint64
	id        string
	key       string
	headers   map[string]string
	payload   []byte
	published int64 // Unix nanoseconds
	// refs counts the groups that have not settled the entry yet.
	refs int32
}

// release drops the references to the message data so the garbage
// collector can take it while the entry struct itself may still be held
// by a slab or a stale lease.
func (e *entry) release() {
	e.id, e.key, e.headers, e.payload = "", "", nil, nil
}

// topic is a retained log of entries plus its consumer groups. Every field
// is guarded by mu.
//
// The log is a ring of entry pointers covering the offsets [base, head).
// A slot is nil once its entry has been freed (settled by every group).
// base only moves past nil slots, or past entries that every group has
// already received when the window grows too large (see advance); such an
// entry lives on through its leases and redelivery queues.
type topic struct {
	mu   sync.Mutex
	name string
	b    *broker

	ring       []*entry
	base, head uint64

	// live counts entries that are retained: not yet settled by every
	// group, or, while the topic has no group, held in the ring.
	live int

	groups map[string]*group
	glist  []*group

	// spaceCh is closed (and reset) when live goes down while publishers
	// wait for room under BacklogWait.
	spaceCh chan struct{}

	// dropped counts entries dropped because the topic had no group and
	// held MaxBacklog entries already.
	dropped uint64
}

const minRing = 64

func newTopic(b *broker, name string) *topic {
	return &topic{name: name, b: b, ring: make([]*entry, minRing), groups: map[string]*group{}}
}

func (t *topic) mask() uint64 { return uint64(len(t.ring) - 1) }

// at returns the entry at off, or nil when it is freed or outside the log.
func (t *topic) at(off uint64) *entry {
	if off < t.base || off >= t.head {
		return nil
	}
	return t.ring[off&t.mask()]
}

// resize moves the window [base, head) into a ring of n slots (a power of
// two at least head-base).
func (t *topic) resize(n int) {
	r := make([]*entry, n)
	m := uint64(n - 1)
	for off := t.base; off < t.head; off++ {
		r[off&m] = t.ring[off&t.mask()]
	}
	t.ring = r
}

// appendEntries adds es to the log and hands one reference to each group.
func (t *topic) appendEntries(es []entry) {
	need := int(t.head-t.base) + len(es)
	if need > len(t.ring) {
		n := len(t.ring)
		for n < need {
			n *= 2
		}
		t.resize(n)
	}
	refs := int32(len(t.glist))
	m := t.mask()
	for i := range es {
		e := &es[i]
		e.off = t.head
		e.refs = refs
		t.ring[t.head&m] = e
		t.head++
	}
	t.live += len(es)
	if len(t.glist) == 0 {
		// No group yet: keep the newest MaxBacklog entries, drop the
		// oldest so publishing with no subscriber never blocks.
		for t.live > t.b.opts.MaxBacklog {
			t.dropFront()
			t.dropped++
		}
	}
	if len(t.glist) > 0 && t.head-t.base > 2*uint64(t.b.opts.MaxBacklog) {
		t.advance()
	}
	for _, g := range t.glist {
		g.notify()
	}
}

// dropFront drops the oldest entry of a topic that has no group.
func (t *topic) dropFront() {
	i := t.base & t.mask()
	if e := t.ring[i]; e != nil {
		e.release()
		t.ring[i] = nil
		t.live--
	}
	t.base++
}

// settle takes one group's reference off e and frees it when it was the
// last.
func (t *topic) settle(e *entry) {
	e.refs--
	if e.refs > 0 {
		return
	}
	e.release()
	t.live--
	if e.off >= t.base && e.off < t.head {
		t.ring[e.off&t.mask()] = nil
	}
	if t.spaceCh != nil {
		close(t.spaceCh)
		t.spaceCh = nil
	}
	if e.off == t.base {
		t.advance()
	}
}

// advance moves base past freed slots. When the window is more than twice
// the backlog limit (an old entry is stuck unsettled while newer ones
// were settled), it also moves past entries every group has already
// received: they stay alive through their leases and queues, and only a
// group created later with StartOldest no longer sees them. This keeps the
// ring, and so memory, bounded by the backlog limit.
func (t *topic) advance() {
	m := t.mask()
	for t.base < t.head && t.ring[t.base&m] == nil {
		t.base++
	}
	if t.head-t.base > 2*uint64(t.b.opts.MaxBacklog) && len(t.glist) > 0 {
		minCursor := t.head
		for _, g := range t.glist {
			minCursor = min(minCursor, g.cursor)
		}
		for t.base < minCursor && t.head-t.base > uint64(t.b.opts.MaxBacklog) {
			t.ring[t.base&m] = nil
			t.base++
			for t.base < t.head && t.ring[t.base&m] == nil {
				t.base++
			}
		}
	}
	if n := len(t.ring); n > minRing && int(t.head-t.base) < n/4 {
		t.resize(n / 2)
	}
}

// addGroup creates group name positioned at from.
func (t *topic) addGroup(name string, from backend.StartFrom) *group {
	g := newGroup(t, name)
	first := len(t.glist) == 0
	switch from {
	case backend.StartOldest:
		g.cursor = t.base
		for off := t.base; off < t.head; off++ {
			if e := t.ring[off&t.mask()]; e != nil {
				e.refs++
			}
		}
	default:
		g.cursor = t.head
		if first {
			// Entries kept while the topic had no group belong to nobody.
			for t.base < t.head {
				t.dropFront()
			}
			if len(t.ring) > minRing {
				t.ring = make([]*entry, minRing)
			}
		}
	}
	t.groups[name] = g
	t.glist = append(t.glist, g)
	return g
}

// copyEntries copies msgs into entries the topic can keep: the caller owns
// the messages, their header maps and payloads. Payloads of the batch
// share one allocation, each capped to its own length.
func copyEntries(msgs []*backend.Message) []entry {
	size := 0
	for _, m := range msgs {
		size += len(m.Payload)
	}
	slab := make([]byte, size)
	es := make([]entry, len(msgs))
	var now int64
	pos := 0
	for i, m := range msgs {
		e := &es[i]
		e.id, e.key = m.ID, m.Key
		if len(m.Headers) > 0 {
			e.headers = maps.Clone(m.Headers)
		}
		if m.Payload != nil {
			n := copy(slab[pos:], m.Payload)
			e.payload = slab[pos : pos+n : pos+n]
			pos += n
		}
		if m.PublishedAt.IsZero() {
			if now == 0 {
				now = time.Now().UnixNano()
			}
			e.published = now
		} else {
			e.published = m.PublishedAt.UnixNano()
		}
	}
	return es
}
