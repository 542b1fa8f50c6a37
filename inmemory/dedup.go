package inmemory

import (
	"hash/maphash"

	"github.com/eventbus-go/bus/backend"
)

// dedup remembers the IDs published to a topic within the dedup window,
// so that a message published again with the same ID (a Publish retried
// after its ctx ended, say) is stored once. It remembers at most max IDs:
// under a load that publishes more within the window, the oldest are
// forgotten early. Guarded by the topic's inMu.
//
// The IDs are kept in a ring in publish order, each with its hash; a map
// from hash to the ID's place in the ring finds them. The map holds no
// pointers, so the collector does not walk it, and a lookup compares the
// ID itself: two IDs with one hash can only make the first forgotten
// early (published twice), never a new message taken for a duplicate.
type dedup struct {
	window int64 // nanoseconds; 0: off
	max    int
	seed   maphash.Seed
	at     map[uint64]uint64 // hash -> sequence number of its latest ID
	// order is the ring of remembered IDs: sequence numbers first to
	// first+n-1, the oldest at head. It grows by doubling up to max.
	order   []seenID
	head, n int
	first   uint64
}

type seenID struct {
	id    string
	until int64 // when it is forgotten (broker clock)
}

// dedupKey is the ID under which e is remembered: its ID, and for a
// message the bus replayed from a dead-letter topic also the replay's
// stamp, so a replay is not taken for a duplicate of the original.
func dedupKey(e *entry) string {
	if r, ok := e.headers[backend.HeaderReplayed]; ok {
		return e.id + "\x00" + r
	}
	return e.id
}

// has reports whether key is remembered and not yet past its window.
func (d *dedup) has(key string, now int64) bool {
	if d.at == nil {
		return false
	}
	seq, ok := d.at[maphash.String(d.seed, key)]
	if !ok || seq < d.first {
		return false
	}
	s := d.order[(d.head+int(seq-d.first))%len(d.order)]
	return s.id == key && s.until > now
}

// fresh compacts es in place to the entries whose ID is not remembered
// (the first of those that repeat within es) and returns them with their
// bytes. It records nothing: record does, once the batch is admitted.
func (d *dedup) fresh(es []entry, bytes int64, now int64) ([]entry, int64) {
	if d.window == 0 {
		return es, bytes
	}
	var batch map[string]struct{}
	if len(es) > 16 {
		batch = make(map[string]struct{}, len(es))
	}
	n := 0
	for i := range es {
		k := dedupKey(&es[i])
		if d.has(k, now) || repeats(es[:n], k, batch) {
			bytes -= int64(es[i].size)
			continue
		}
		if batch != nil {
			batch[k] = struct{}{}
		}
		es[n] = es[i]
		n++
	}
	clear(es[n:])
	return es[:n], bytes
}

// repeats reports whether key is among the kept entries (or in batch,
// their keys, for a large batch).
func repeats(kept []entry, key string, batch map[string]struct{}) bool {
	if batch != nil {
		_, ok := batch[key]
		return ok
	}
	for i := range kept {
		if dedupKey(&kept[i]) == key {
			return true
		}
	}
	return false
}

// record remembers the IDs of the admitted batch es and forgets those
// past the window or over max.
func (d *dedup) record(es []entry, now int64) {
	if d.window == 0 {
		return
	}
	if d.at == nil {
		d.at, d.seed = map[uint64]uint64{}, maphash.MakeSeed()
	}
	for d.n > 0 && d.order[d.head].until <= now {
		d.pop()
	}
	until := now + d.window
	for i := range es {
		if d.n == len(d.order) {
			if len(d.order) < d.max {
				d.grow()
			} else {
				d.pop()
			}
		}
		k := dedupKey(&es[i])
		seq := d.first + uint64(d.n)
		d.order[(d.head+d.n)%len(d.order)] = seenID{id: k, until: until}
		d.n++
		d.at[maphash.String(d.seed, k)] = seq
	}
}

// pop forgets the oldest remembered ID.
func (d *dedup) pop() {
	h := maphash.String(d.seed, d.order[d.head].id)
	if d.at[h] == d.first {
		delete(d.at, h)
	}
	d.order[d.head] = seenID{}
	d.head = (d.head + 1) % len(d.order)
	d.n--
	d.first++
}

// grow doubles the ring, up to max.
func (d *dedup) grow() {
	r := make([]seenID, min(max(2*len(d.order), 1024), d.max))
	for i := range d.n {
		r[i] = d.order[(d.head+i)%len(d.order)]
	}
	d.order, d.head = r, 0
}
