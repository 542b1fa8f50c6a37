package msgid

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNewIsUniqueAndIncreasingAcrossGoroutines(t *testing.T) {
	const workers, each = 8, 5000
	out := make([][]string, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids := make([]string, each)
			for i := range ids {
				ids[i] = New()
			}
			out[w] = ids
		}()
	}
	wg.Wait()
	seen := make(map[string]bool, workers*each)
	for _, ids := range out {
		for i, id := range ids {
			require.False(t, seen[id], "duplicate id %s", id)
			seen[id] = true
			if i > 0 {
				assert.Greater(t, id, ids[i-1], "ids of one goroutine increase")
			}
		}
	}
}

func TestNewHasVersion7AndVariantBits(t *testing.T) {
	id := New()
	require.Len(t, id, 36)
	assert.Equal(t, byte('7'), id[14], "version nibble")
	assert.Contains(t, "89ab", string(id[19]), "RFC 9562 variant")
	for _, i := range []int{8, 13, 18, 23} {
		assert.Equal(t, byte('-'), id[i], "dash at %d", i)
	}
}

func TestBatchIsUniqueIncreasingAndAfterNew(t *testing.T) {
	before := New()
	all := Batch(1000)
	require.Len(t, all, 36*1000)
	ids := make([]string, 1000)
	for i := range ids {
		ids[i] = all[36*i : 36*i+36]
	}
	prev := before
	for _, id := range ids {
		require.Len(t, id, 36)
		assert.Greater(t, id, prev, "batch ids increase and follow earlier ids")
		prev = id
	}
	assert.Greater(t, New(), prev, "later ids follow the batch")
	for i, id := range ids {
		var u [16]byte
		fill(&u, reserveAt(ids[0])+uint64(i))
		assert.Equal(t, Format(u), id, "batch id %d renders like a single id", i)
	}
	assert.Empty(t, Batch(0))
}

// reserveAt recovers the (ms << 16 | sequence) value of an ID.
func reserveAt(id string) uint64 {
	v, ok := Parse(id)
	if !ok {
		panic("not an ID of this process: " + id)
	}
	return v
}

func BenchmarkBatch16(b *testing.B) {
	for b.Loop() {
		_ = Batch(16)
	}
}

func BenchmarkNew(b *testing.B) {
	for b.Loop() {
		_ = New()
	}
}
