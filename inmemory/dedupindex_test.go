package inmemory

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSeqIndexMatchesAMapUnderChurn drives the index the way a dedup
// window at its bound does (insert the newest, forget the oldest) with
// hashes drawn from a small range, so that probe chains collide, wrap
// around the table and are shifted back on removal, and compares every
// lookup with a map.
func TestSeqIndexMatchesAMapUnderChurn(t *testing.T) {
	const live = 300
	var x seqIndex
	x.reset(live)
	model := map[uint64]uint64{}
	hashes := make([]uint64, 0, 20_000)
	r := rand.New(rand.NewPCG(1, 2))
	for seq := range uint64(20_000) {
		h := r.Uint64N(4096) << 52 // few distinct homes: long chains
		if seq%7 == 0 {
			h = 0 // stored as 1
		}
		hashes = append(hashes, h)
		x.set(h, seq)
		model[indexHash(h)] = seq
		if seq >= live {
			old := seq - live
			x.remove(hashes[old], old)
			if model[indexHash(hashes[old])] == old {
				delete(model, indexHash(hashes[old]))
			}
		}
		if seq%97 == 0 {
			// The live window and as many forgotten before it.
			requireSameAsModel(t, &x, model, hashes[max(0, len(hashes)-2*live):])
		}
	}
	requireSameAsModel(t, &x, model, hashes)
}

func requireSameAsModel(t *testing.T, x *seqIndex, model map[uint64]uint64, hashes []uint64) {
	t.Helper()
	require.Equal(t, len(model), x.n, "the index holds as many hashes as the model")
	require.LessOrEqual(t, 2*x.n, len(x.slots), "the index stays at most half full")
	for _, h := range hashes {
		want, wantOK := model[indexHash(h)]
		got, ok := x.get(h)
		if ok != wantOK || got != want {
			require.Equal(t, wantOK, ok, "hash %#x present", h)
			require.Equal(t, want, got, "hash %#x maps to its latest sequence number", h)
		}
	}
}
