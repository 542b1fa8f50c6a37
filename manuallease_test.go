package bus

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestManualLeasesHeapStaysOrderedAndIndexed drives the heap with random
// adds, moves and removals, and checks after each step that every queued
// delivery knows its index and that fire would take the earliest first.
func TestManualLeasesHeapStaysOrderedAndIndexed(t *testing.T) {
	m := &manualLeases{timerAt: 1} // a timer "set" far back: no real timer is started
	r := rand.New(rand.NewPCG(1, 2))
	var queued []*Delivery
	for step := range 5000 {
		switch op := r.IntN(3); {
		case op == 0 || len(queued) == 0:
			d := &Delivery{ext: &deliveryExt{}}
			require.True(t, m.add(d, d.ext, r.Int64N(1000)+2), "add")
			queued = append(queued, d)
		case op == 1:
			d := queued[r.IntN(len(queued))]
			m.move(d.ext, r.Int64N(1000)+2)
		default:
			i := r.IntN(len(queued))
			require.True(t, m.remove(queued[i].ext), "step %d: remove a queued delivery", step)
			require.Zero(t, queued[i].ext.leaseIdx, "step %d: a removed delivery is not indexed", step)
			require.False(t, m.remove(queued[i].ext), "step %d: removing twice", step)
			queued = append(queued[:i], queued[i+1:]...)
		}
		require.Len(t, m.heap, len(queued), "step %d", step)
		for i, e := range m.heap {
			require.Equal(t, i+1, e.d.ext.leaseIdx, "step %d: index of entry %d", step, i)
			if i > 0 {
				require.LessOrEqual(t, m.heap[(i-1)/2].end, e.end, "step %d: heap order at %d", step, i)
			}
		}
	}
	ds := m.drain()
	require.Len(t, ds, len(queued), "drain returns every queued delivery")
	for _, d := range ds {
		require.Zero(t, d.ext.leaseIdx, "a drained delivery is not indexed")
	}
	require.False(t, m.add(&Delivery{ext: &deliveryExt{}}, &deliveryExt{}, 5), "add after drain")
}
