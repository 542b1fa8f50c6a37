package inmemory

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSeqIndexMatchesAMapUnderChurn drives the index the way a dedup
// window at its bound does (insert the newest, forget the oldest) with
// hashes whose homes are the last slots of its 1,024, so that probe
// chains collide, wrap around the table's end and are shifted back on
// removal, and compares the lookups with a map.
func TestSeqIndexMatchesAMapUnderChurn(t *testing.T) {
	const live = 300
	var x seqIndex
	x.reset(live)
	model := map[uint64]uint64{}
	hashes := make([]uint64, 0, 20_000)
	r := rand.New(rand.NewPCG(1, 2))
	for seq := range uint64(20_000) {
		// Homes in the last slots of the table, so that chains wrap
		// around its end, and few distinct hashes, so that some repeat.
		h := r.Uint64N(64)<<10 | (1000 + r.Uint64N(24))
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
