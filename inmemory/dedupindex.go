package inmemory

// seqIndex maps the hash of a remembered ID to the sequence number of the
// latest ID with that hash: an open-addressing table with linear probing
// and backward-shift deletion, so that the steady insert-and-forget churn
// of a dedup window at its bound leaves no tombstones behind to lengthen
// the probes (a Go map under the same churn spent most of a publish in
// probing). It holds no pointers, so the collector does not walk it. Hash
// 0 marks an empty slot; a hash of 0 is stored as 1, which only adds a
// collision, and a collision only makes an ID forgotten early (see dedup).
// Not safe for concurrent use.
type seqIndex struct {
	slots []seqSlot // len is a power of two, at most half full
	n     int
}

type seqSlot struct {
	h, seq uint64
}

// indexHash maps h to the hash the index stores.
func indexHash(h uint64) uint64 { return max(h, 1) }

// reset empties the index and sizes it for up to n entries.
func (x *seqIndex) reset(n int) {
	size := 16
	for size < 2*n {
		size *= 2
	}
	if len(x.slots) == size {
		clear(x.slots)
	} else {
		x.slots = make([]seqSlot, size)
	}
	x.n = 0
}

// find returns the slot of h, or the empty slot where it would go.
func (x *seqIndex) find(h uint64) int {
	mask := len(x.slots) - 1
	i := int(h) & mask
	for x.slots[i].h != 0 && x.slots[i].h != h {
		i = (i + 1) & mask
	}
	return i
}

// get returns the sequence number stored for h.
func (x *seqIndex) get(h uint64) (uint64, bool) {
	if len(x.slots) == 0 {
		return 0, false
	}
	s := x.slots[x.find(indexHash(h))]
	return s.seq, s.h != 0
}

// set stores seq for h. The caller keeps the index at most half full
// (reset with the most entries it will hold).
func (x *seqIndex) set(h, seq uint64) {
	h = indexHash(h)
	i := x.find(h)
	if x.slots[i].h == 0 {
		x.n++
	}
	x.slots[i] = seqSlot{h: h, seq: seq}
}

// remove deletes h if it maps to seq (a later ID with the same hash keeps
// its entry), shifting the entries after it back so that every entry
// stays reachable from its home slot.
func (x *seqIndex) remove(h, seq uint64) {
	if len(x.slots) == 0 {
		return
	}
	h = indexHash(h)
	i := x.find(h)
	if x.slots[i].h == 0 || x.slots[i].seq != seq {
		return
	}
	mask := len(x.slots) - 1
	for j := (i + 1) & mask; x.slots[j].h != 0; j = (j + 1) & mask {
		home := int(x.slots[j].h) & mask
		// The entry at j may move to the hole at i when its home is not
		// in the cyclic range (i, j].
		if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
			x.slots[i] = x.slots[j]
			i = j
		}
	}
	x.slots[i] = seqSlot{}
	x.n--
}
