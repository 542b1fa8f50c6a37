package inmemory

import (
	"hash/maphash"
	"slices"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/msgid"
)

// dedup remembers the IDs published to a topic within the dedup window,
// so that a message published again with the same ID (a Publish retried
// after its ctx ended, say) is stored once. It remembers at most max IDs:
// under a load that publishes more within the window, the oldest are
// forgotten early. Guarded by the topic's inMu.
//
// The IDs are kept in a ring in publish order, each with its hash; an
// index from hash to the ID's place in the ring finds them (seqIndex),
// and a lookup compares the ID itself: two IDs with one hash can only
// make the first forgotten early (published twice), never a new message
// taken for a duplicate. The IDs the bus generated are remembered apart,
// by their values (genIDs), much more cheaply; whether an ID is one of
// them depends on the ID alone, so it is always looked for where it was
// remembered.
type dedup struct {
	window int64 // nanoseconds; 0: off
	max    int
	seed   maphash.Seed
	at     seqIndex // hash -> sequence number of its latest ID
	// order is the ring of remembered IDs: sequence numbers first to
	// first+n-1, the oldest at head. It grows by doubling up to max.
	order   []seenID
	head, n int
	first   uint64
	// kept are the keys and hashes of the batch fresh let through, for
	// record, and keptGen the values of its generated IDs.
	kept    []keyHash
	keptGen []uint64
	// batch indexes kept and keptGen by hash while fresh checks a large
	// batch: an open-addressing table of places in kept (plus one) and in
	// keptGen (minus one); 0 is empty. Reused from batch to batch.
	batch []int32
	large bool
	gens  genIDs
	// parser reads generated IDs (msgid.Parse), remembering the
	// millisecond the IDs of a batch share.
	parser msgid.Parser
	// genHigh is at least every generated value remembered or kept (0:
	// none yet). The generator hands out increasing values, so a batch
	// of new messages is above it, and a value above it is neither
	// remembered nor a repeat within the batch: no lookup is made for
	// it. It only grows: values forgotten, or kept for a batch that was
	// not admitted, leave it an upper bound.
	genHigh uint64
}

// keyHash is a kept key, not a generated ID, and its hash.
type keyHash struct {
	key string
	h   uint64
}

type seenID struct {
	id    string
	h     uint64
	until int64 // when it is forgotten (broker clock)
}

// dedupKey is the ID under which e is remembered: its ID, and for a
// message the bus replayed from a dead-letter topic also the replay's
// stamp, so a replay is not taken for a duplicate of the original.
func dedupKey(e *entry) string {
	if e.meta == nil {
		return e.id
	}
	if r, ok := e.meta.headers[backend.HeaderReplayed]; ok {
		return e.id + "\x00" + r
	}
	return e.id
}

// has reports whether key (of hash h) is remembered and not yet past
// its window.
func (d *dedup) has(key string, h uint64, now int64) bool {
	seq, ok := d.at.get(h)
	if !ok || seq < d.first {
		return false
	}
	s := d.order[(d.head+int(seq-d.first))%len(d.order)]
	return s.id == key && s.until > now
}

// fresh compacts es in place to the entries whose ID is not remembered
// (the first of those that repeat within es) and returns them with their
// bytes. It keeps their keys and hashes for record, which remembers them
// once the batch is admitted; it records nothing itself.
func (d *dedup) fresh(es []entry, bytes int64, now int64) ([]entry, int64) {
	if d.window == 0 {
		return es, bytes
	}
	if d.seed == (maphash.Seed{}) {
		// The ring and its index wait for the first ID that is not a
		// generated one (record grows them).
		d.seed = maphash.MakeSeed()
	}
	d.kept, d.keptGen = d.kept[:0], d.keptGen[:0]
	if d.large = len(es) > 32; d.large {
		d.resetBatch(len(es))
	}
	n := 0
	for i := range es {
		k := dedupKey(&es[i])
		h, gen := d.parser.Parse(k)
		if !gen {
			h = maphash.String(d.seed, k)
		}
		if gen && h > d.genHigh {
			d.genHigh = h // new: neither remembered nor kept before
		} else if gen && d.gens.has(h, now) || !gen && d.has(k, h, now) || d.repeats(k, h, gen) {
			bytes -= int64(es[i].size)
			continue
		}
		if gen {
			// A generated ID is known by its value alone.
			if d.large {
				d.batch[d.batchFind(k, h, gen)] = -int32(len(d.keptGen) + 1)
			}
			d.keptGen = append(d.keptGen, h)
		} else {
			if d.large {
				d.batch[d.batchFind(k, h, gen)] = int32(len(d.kept) + 1)
			}
			d.kept = append(d.kept, keyHash{key: k, h: h})
		}
		if n != i {
			es[n] = es[i] // a repeat was dropped before
		}
		n++
	}
	clear(es[n:])
	return es[:n], bytes
}

// repeats reports whether key (of hash h, generated or not) is among the
// kept keys of the batch: a scan of a small batch, a lookup in the batch
// index for a large one.
func (d *dedup) repeats(key string, h uint64, gen bool) bool {
	if d.large {
		return d.batch[d.batchFind(key, h, gen)] != 0
	}
	if gen {
		return slices.Contains(d.keptGen, h)
	}
	for i := range d.kept {
		if d.kept[i].h == h && d.kept[i].key == key {
			return true
		}
	}
	return false
}

// is reports whether the place p of the batch index (see dedup.batch)
// holds key, of hash h, generated or not. Two generated IDs with one
// value are the same string (msgid.Parse), and whether an ID is
// generated depends on the ID alone.
func (d *dedup) is(p int32, key string, h uint64, gen bool) bool {
	if p < 0 {
		return gen && d.keptGen[-p-1] == h
	}
	k := &d.kept[p-1]
	return !gen && k.h == h && k.key == key
}

// resetBatch empties the batch index and sizes it for n keys, at most
// half full.
func (d *dedup) resetBatch(n int) {
	size := 64
	for size < 2*n {
		size *= 2
	}
	if cap(d.batch) < size {
		d.batch = make([]int32, size)
	}
	d.batch = d.batch[:size]
	clear(d.batch)
}

// batchFind returns the slot of the batch index that holds key (of hash
// h, generated or not), or the empty slot where it goes.
func (d *dedup) batchFind(key string, h uint64, gen bool) int {
	mask := len(d.batch) - 1
	i := int(h) & mask
	for d.batch[i] != 0 {
		if d.is(d.batch[i], key, h, gen) {
			return i
		}
		i = (i + 1) & mask
	}
	return i
}

// record remembers the IDs fresh kept, of the batch that was admitted, and
// forgets those past the window or over max.
func (d *dedup) record(now int64) {
	if d.window == 0 {
		return
	}
	for d.n > 0 && d.order[d.head].until <= now {
		d.pop()
	}
	d.gens.expire(now)
	until := now + d.window
	d.gens.addRun(d.keptGen, until)
	for _, k := range d.kept {
		if d.n == len(d.order) {
			if len(d.order) < d.max {
				d.grow()
			} else {
				d.pop()
			}
		}
		d.order[(d.head+d.n)%len(d.order)] = seenID{id: k.key, h: k.h, until: until}
		d.at.set(k.h, d.first+uint64(d.n))
		d.n++
	}
	for d.n+d.gens.n > d.max {
		if d.n > 0 && d.order[d.head].until <= d.gens.oldest() {
			d.pop()
		} else {
			d.gens.pop()
		}
	}
	clear(d.kept)
	d.kept, d.keptGen = d.kept[:0], d.keptGen[:0]
}

// pop forgets the oldest remembered ID.
func (d *dedup) pop() {
	d.at.remove(d.order[d.head].h, d.first)
	d.order[d.head] = seenID{}
	d.head = (d.head + 1) % len(d.order)
	d.n--
	d.first++
}

// grow doubles the ring, up to max, and rebuilds the index for it.
func (d *dedup) grow() {
	r := make([]seenID, min(max(2*len(d.order), 1024), d.max))
	d.at.reset(len(r))
	for i := range d.n {
		r[i] = d.order[(d.head+i)%len(d.order)]
		d.at.set(r[i].h, d.first+uint64(i))
	}
	d.order, d.head = r, 0
}
