package slab_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/internal/slab"
)

func TestCopiesAreExactAndIsolated(t *testing.T) {
	s := slab.New(5)
	require.Equal(t, 5, s.Room(), "room for exactly what was asked")
	a := s.Copy([]byte("abc"))
	empty := s.Copy([]byte{})
	b := s.Copy([]byte("de"))
	assert.Equal(t, []byte("abc"), a)
	assert.NotNil(t, empty, "an empty slice stays empty, not nil")
	assert.Empty(t, empty)
	assert.Equal(t, []byte("de"), b)
	assert.Zero(t, s.Room(), "the room is used up")
	assert.Equal(t, len(a), cap(a), "each copy is capped to its length")
	grown := append(a, 'X')
	assert.Equal(t, []byte("abcX"), grown)
	assert.Equal(t, []byte("de"), b, "appending to one copy never reaches the next")
	// Past its room, and without a slab, a copy gets an allocation of
	// its own.
	c := s.Copy([]byte("fgh"))
	assert.Equal(t, []byte("fgh"), c)
	var none *slab.Bytes
	assert.Equal(t, []byte("ij"), none.Copy([]byte("ij")))
	assert.NotNil(t, none.Copy(nil))
	assert.Zero(t, none.Room())
}

func TestCopiesShareOneAllocation(t *testing.T) {
	p := []byte("0123456789abcdef")
	allocs := testing.AllocsPerRun(100, func() {
		s := slab.New(16 * len(p))
		for range 16 {
			_ = s.Copy(p)
		}
	})
	assert.LessOrEqual(t, allocs, 2.0, "the slab and its backing array, not one per copy")
}

func TestChunksCarveDisjointSlabs(t *testing.T) {
	var c slab.Chunks
	a := c.Take(3)
	b := c.Take(2)
	require.Equal(t, 3, a.Room(), "room for exactly what was asked")
	x := a.Copy([]byte("abc"))
	y := b.Copy([]byte("de"))
	assert.Zero(t, a.Room(), "a slab never grows into the next")
	grown := append(x, 'X')
	assert.Equal(t, []byte("abcX"), grown)
	assert.Equal(t, []byte("de"), y, "appending to a copy never reaches the next slab")
	big := c.Take(slab.ChunkSize)
	assert.Equal(t, slab.ChunkSize, big.Room(), "a slab larger than a quarter chunk is allocated on its own")
}

func TestChunksShareAllocationsAcrossBatches(t *testing.T) {
	var c slab.Chunks
	p := make([]byte, 256)
	allocs := testing.AllocsPerRun(64, func() {
		s := c.Take(16 * len(p))
		for range 16 {
			_ = s.Copy(p)
		}
	})
	assert.LessOrEqual(t, allocs, 0.5, "four batches of 4 KiB to a chunk")
}

func TestChunksAreSafeForConcurrentUse(t *testing.T) {
	var c slab.Chunks
	done := make(chan []byte, 8)
	for i := range 8 {
		go func() {
			var out []byte
			for range 100 {
				s := c.Take(100)
				out = s.Copy(bytes.Repeat([]byte{byte(i)}, 100))
				for _, v := range out {
					if v != byte(i) {
						done <- nil
						return
					}
				}
			}
			done <- out
		}()
	}
	for range 8 {
		assert.NotNil(t, <-done, "no two slabs share bytes")
	}
}

func TestRunsCarveDisjointZeroedRuns(t *testing.T) {
	type rec struct {
		p *int
		n int
	}
	var r slab.Runs[rec]
	a := r.Take(3)
	b := r.Take(2)
	require.Len(t, a, 3, "a run of what was asked")
	assert.Equal(t, 3, cap(a), "a run is capped to its length")
	assert.Equal(t, []rec{{}, {}}, b, "a run is zeroed")
	v := 1
	grown := append(a, rec{p: &v, n: 1})
	assert.Len(t, grown, 4, "a run grows by a copy of its own")
	assert.Equal(t, []rec{{}, {}}, b, "appending to a run never reaches the next")
	allocs := testing.AllocsPerRun(64, func() { _ = r.Take(16) })
	assert.Less(t, allocs, 0.5, "several runs to a chunk")
}
