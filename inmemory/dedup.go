package inmemory

import "github.com/eventbus-go/bus/backend"

// dedup remembers the IDs published to a topic within the dedup window,
// so that a message published again with the same ID (a Publish retried
// after its ctx ended, say) is stored once. It remembers at most max IDs:
// under a load that publishes more within the window, the oldest are
// forgotten early. Guarded by the topic's inMu.
type dedup struct {
	window int64 // nanoseconds; 0: off
	max    int
	seen   map[string]int64 // ID -> when it is forgotten (broker clock)
	order  []seenID         // FIFO of the recorded IDs
	head   int
}

type seenID struct {
	id    string
	until int64
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
		if until, ok := d.seen[k]; ok && until > now || repeats(es[:n], k, batch) {
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
	if d.seen == nil {
		d.seen = map[string]int64{}
	}
	until := now + d.window
	for i := range es {
		k := dedupKey(&es[i])
		d.seen[k] = until
		d.order = append(d.order, seenID{id: k, until: until})
	}
	for d.head < len(d.order) && (d.order[d.head].until <= now || len(d.order)-d.head > d.max) {
		s := d.order[d.head]
		if d.seen[s.id] == s.until {
			delete(d.seen, s.id)
		}
		d.order[d.head] = seenID{}
		d.head++
	}
	if d.head > len(d.order)/2 && d.head > 1024 {
		d.order = append(d.order[:0], d.order[d.head:]...)
		d.head = 0
	}
}
