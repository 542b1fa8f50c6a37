package main

import (
	"sync"
	"sync/atomic"
)

// tracker counts deliveries by sequence number with one bit per message, so
// duplicates are found without a map and with two atomic operations per
// delivery. Safe for concurrent use.
type tracker struct {
	n       int64
	bits    []atomic.Uint64
	unique  atomic.Int64
	dups    atomic.Int64
	foreign atomic.Int64 // not stamped by this run, or out of range

	once sync.Once
	done chan struct{} // closed when every sequence number arrived
}

func newTracker(n int64) *tracker {
	t := &tracker{n: n, bits: make([]atomic.Uint64, (n+63)/64), done: make(chan struct{})}
	if n == 0 {
		close(t.done)
	}
	return t
}

// mark records the delivery of seq.
func (t *tracker) mark(seq uint64) {
	if seq >= uint64(t.n) {
		t.foreign.Add(1)
		return
	}
	bit := uint64(1) << (seq & 63)
	if t.bits[seq>>6].Or(bit)&bit != 0 {
		t.dups.Add(1)
		return
	}
	if t.unique.Add(1) == t.n {
		t.once.Do(func() { close(t.done) })
	}
}

// Delivered returns every delivery of this run's messages, duplicates
// included.
func (t *tracker) Delivered() int64 { return t.unique.Load() + t.dups.Load() }

// Unique returns how many distinct messages arrived.
func (t *tracker) Unique() int64 { return t.unique.Load() }
