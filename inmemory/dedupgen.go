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
	blocks map[uint64]*genBlock
	order  fifo[*genBlock] // by first ID, the oldest at the front
	n      int             // IDs remembered
	// last is the block that has or add found last: the IDs of a batch
	// mostly share one.
	last *genBlock
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
	b := g.block(v)
	return b != nil && b.bits&(1<<(v&63)) != 0 && b.until > now
}

// add remembers the ID of value v until until.
func (g *genIDs) add(v uint64, until int64) {
	b := g.block(v)
	if b == nil {
		if g.blocks == nil {
			g.blocks = map[uint64]*genBlock{}
		}
		b = &genBlock{at: v >> 6, first: until}
		g.blocks[b.at] = b
		g.order.push(b)
		g.last = b
	}
	if bit := uint64(1) << (v & 63); b.bits&bit == 0 {
		b.bits |= bit
		g.n++
	}
	b.until = until
}

// block returns the block of value v, or nil.
func (g *genIDs) block(v uint64) *genBlock {
	if g.last != nil && g.last.at == v>>6 {
		return g.last
	}
	b := g.blocks[v>>6]
	if b != nil {
		g.last = b
	}
	return b
}

// expire forgets the oldest blocks whose IDs are all past their window.
func (g *genIDs) expire(now int64) {
	for g.order.len() > 0 && (*g.order.front()).until <= now {
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
	return (*g.order.front()).first
}

// pop forgets the oldest block.
func (g *genIDs) pop() {
	b := g.order.pop()
	delete(g.blocks, b.at)
	if g.last == b {
		g.last = nil
	}
	g.n -= bits.OnesCount64(b.bits)
}
