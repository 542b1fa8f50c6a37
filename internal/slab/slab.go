// Package slab copies many small byte slices into one allocation: a
// backend that must copy the payloads of a batch (the memory broker on
// publish, a Redis read on receive) pays one allocation per batch instead
// of one per message, for the allocator and the garbage collector alike.
package slab

import (
	"sync/atomic"
	"unsafe"
)

// Bytes hands out copies from one backing array. A copy is capped to its
// own length, so appending to it never reaches a neighbour. The backing
// array stays alive while any copy does. Not safe for concurrent use.
type Bytes struct{ b []byte }

// New returns a slab with room for size bytes of copies.
func New(size int) *Bytes { return &Bytes{b: make([]byte, 0, size)} }

// Copy returns a copy of p, from the slab while it has room (a nil slab
// has none) and from an allocation of its own otherwise. The copy is never
// nil, also when p is.
func (s *Bytes) Copy(p []byte) []byte {
	if s == nil || len(p) > cap(s.b)-len(s.b) {
		return append(make([]byte, 0, len(p)), p...)
	}
	start := len(s.b)
	s.b = append(s.b, p...)
	return s.b[start:len(s.b):len(s.b)]
}

// Room reports how many more bytes the slab can copy.
func (s *Bytes) Room() int {
	if s == nil {
		return 0
	}
	return cap(s.b) - len(s.b)
}

// ChunkSize is the size of the chunks a Chunks carves its slabs from, and
// ChunkSize/4 the largest slab it carves: a larger one is allocated on
// its own. A chunk is a size class of the allocator that fills its span
// (16 KiB), so that a run of batches takes one span where a slab per
// batch of a few KiB (a size class of two objects to a span) takes one
// every other batch, and the allocator refills, and the collector sweeps,
// that many fewer spans. At most a quarter of a chunk is left unused.
const ChunkSize = 16 << 10

// Chunks carves the slabs of successive batches from shared chunks of
// ChunkSize bytes. A chunk stays alive while any copy in it does: a copy
// that outlives its neighbours keeps up to ChunkSize bytes, where a slab
// of its own would keep its batch's. Its zero value is ready to use; it
// is safe for concurrent use.
type Chunks struct {
	// cur is the chunk with room left, taken by whoever carves from it
	// (nil meanwhile): two batches never get the same bytes.
	cur atomic.Pointer[[]byte]
}

// Take returns a slab with room for size bytes of copies.
func (c *Chunks) Take(size int) Bytes {
	if size > ChunkSize/4 {
		return Bytes{b: make([]byte, 0, size)}
	}
	p := c.cur.Swap(nil)
	if p == nil || cap(*p)-len(*p) < size {
		b := make([]byte, 0, ChunkSize)
		p = &b
	}
	b := *p
	start := len(b)
	*p = b[:start+size]
	if cap(*p) > len(*p) {
		c.cur.Store(p)
	}
	return Bytes{b: b[start : start : start+size]}
}

// RunChunkBytes is the size of the chunks a Runs carves its runs from: a
// size class of the allocator with six objects to a span (9472 bytes,
// less the header of an object with pointers), where the runs of a
// batch or two of small structs land in classes of a span every few
// objects.
const RunChunkBytes = 9472 - 8

// Runs carves runs of T (the records of one batch) from shared chunks of
// about RunChunkBytes, zeroed, as Chunks carves byte slabs: a chunk stays
// alive while any run in it does. A run of more than a quarter chunk is
// allocated on its own. Its zero value is ready to use; it is safe for
// concurrent use.
type Runs[T any] struct {
	cur atomic.Pointer[[]T]
}

// Take returns a run of n zero values of T, capped to n.
func (r *Runs[T]) Take(n int) []T {
	per := max(1, RunChunkBytes/int(unsafe.Sizeof(*new(T))))
	if n > per/4 {
		return make([]T, n)
	}
	p := r.cur.Swap(nil)
	if p == nil || cap(*p)-len(*p) < n {
		c := make([]T, 0, per)
		p = &c
	}
	c := *p
	start := len(c)
	*p = c[:start+n]
	if cap(*p) > len(*p) {
		r.cur.Store(p)
	}
	return c[start : start+n : start+n]
}
