package inmemory

import (
	"math"
	"math/bits"
)

// genIDs remembers the IDs that this process's generator made
// (msgid.Parse: the IDs the bus gives the messages published without
// one) by their values, in blocks of 64 consecutive values: a bit per ID
// and a map entry per block. The generator hands out values in batches,
// so the IDs of a published batch set bits of one or two blocks, where
// the index of other IDs (seqIndex) costs a hash and a memory access of
// its own per ID, taken and later forgotten.
//
// A block is forgotten as a whole, once the window has passed since the
// latest of its IDs was published; an ID may so be remembered longer
// than the window, never shorter (unless over max).
type genIDs struct {
	// blocks maps a block (value >> 6) to its sequence number in order;
	// neither holds a pointer, so the collector does not walk them.
	blocks map[uint64]uint64
	order  fifo[genBlock] // by first ID, the oldest at the front
	first  uint64         // the sequence number of order's front
	n      int            // IDs remembered
	// last is the sequence number of the block that has or add found
	// last (valid when hasLast): the IDs of a batch mostly share one.
	last    uint64
	hasLast bool
}

type genBlock struct {
	at    uint64 // the values' common part: value >> 6
	bits  uint64
	until int64 // when its IDs are forgotten (broker clock)
	first int64 // until of its first ID: how old it is
}

// has reports whether the ID of value v is remembered and not yet past
// its window.
func (g *genIDs) has(v uint64, now int64) bool {
	b := g.block(v >> 6)
	return b != nil && b.bits&(1<<(v&63)) != 0 && b.until > now
}

// addRun remembers the IDs of values vs until until, as many at once as
// share a block: those of a batch mostly do.
func (g *genIDs) addRun(vs []uint64, until int64) {
	for i := 0; i < len(vs); {
		at, set := vs[i]>>6, uint64(0)
		for ; i < len(vs) && vs[i]>>6 == at; i++ {
			set |= 1 << (vs[i] & 63)
		}
		g.add(at, set, until)
	}
}

// add remembers the IDs of the values of block at whose bits set has
// until until.
func (g *genIDs) add(at, set uint64, until int64) {
	b := g.block(at)
	if b == nil {
		if g.blocks == nil {
			g.blocks = map[uint64]uint64{}
		}
		seq := g.first + uint64(g.order.len())
		g.order.push(genBlock{at: at, first: until})
		g.blocks[at] = seq
		g.last, g.hasLast = seq, true
		b = g.at(seq)
	}
	g.n += bits.OnesCount64(set &^ b.bits)
	b.bits |= set
	b.until = until
}

// at returns the block of sequence number seq, which order holds; the
// pointer is valid until order changes.
func (g *genIDs) at(seq uint64) *genBlock {
	q := &g.order
	return &q.buf[(q.head+int(seq-g.first))&(len(q.buf)-1)]
}

// block returns block at (the values' common part, value >> 6), or nil.
func (g *genIDs) block(at uint64) *genBlock {
	if g.hasLast {
		if b := g.at(g.last); b.at == at {
			return b
		}
	}
	seq, ok := g.blocks[at]
	if !ok {
		return nil
	}
	g.last, g.hasLast = seq, true
	return g.at(seq)
}

// expire forgets the oldest blocks whose IDs are all past their window.
func (g *genIDs) expire(now int64) {
	for g.order.len() > 0 && g.order.front().until <= now {
		g.pop()
	}
}

// oldest is the until of the oldest block's first ID (MaxInt64 when there
// is none), to tell which of the two kinds of remembered IDs to forget
// first.
func (g *genIDs) oldest() int64 {
	if g.order.len() == 0 {
		return math.MaxInt64
	}
	return g.order.front().first
}

// pop forgets the oldest block.
func (g *genIDs) pop() {
	b := g.order.pop()
	delete(g.blocks, b.at)
	if g.hasLast && g.last == g.first {
		g.hasLast = false
	}
	g.first++
	g.n -= bits.OnesCount64(b.bits)
}
