// Package slab copies many small byte slices into one allocation: a
// backend that must copy the payloads of a batch (the memory broker on
// publish, a Redis read on receive) pays one allocation per batch instead
// of one per message, for the allocator and the garbage collector alike.
package slab

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
