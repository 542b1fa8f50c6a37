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
	m := &manualLeases{s: &consumer{}, timerAt: 1} // a timer "set" far back: no real timer is started
	r := rand.New(rand.NewPCG(1, 2))
	var queued []*record
	ext := func(d *record) *deliveryExt { return d.ext.Load() }
	for step := range 5000 {
		switch op := r.IntN(3); {
		case op == 0 || len(queued) == 0:
			d := &record{}
			d.ext.Store(&deliveryExt{})
			require.True(t, m.addLocked(d, ext(d), r.Int64N(1000)+2), "add")
			queued = append(queued, d)
		case op == 1:
			d := queued[r.IntN(len(queued))]
			m.moveLocked(ext(d), r.Int64N(1000)+2)
		default:
			i := r.IntN(len(queued))
			x := ext(queued[i])
			require.NotZero(t, x.leaseIdx, "step %d: a queued delivery is indexed", step)
			m.removeLocked(x)
			require.Zero(t, x.leaseIdx, "step %d: a removed delivery is not indexed", step)
			m.removeLocked(x) // removing twice does nothing
			require.Len(t, m.heap, len(queued)-1, "step %d: removing twice removes one", step)
			queued = append(queued[:i], queued[i+1:]...)
		}
		require.Len(t, m.heap, len(queued), "step %d", step)
		for i, e := range m.heap {
			require.Equal(t, i+1, ext(e.d).leaseIdx, "step %d: index of entry %d", step, i)
			require.Same(t, ext(e.d), e.x, "step %d: entry %d holds its delivery's ext", step, i)
			if i > 0 {
				require.LessOrEqual(t, m.heap[(i-1)/2].end, e.end, "step %d: heap order at %d", step, i)
			}
		}
	}
	ds := m.drain()
	require.Len(t, ds, len(queued), "drain returns every queued delivery")
	for _, d := range ds {
		require.Zero(t, ext(d).leaseIdx, "a drained delivery is not indexed")
	}
	require.False(t, m.addLocked(&record{}, &deliveryExt{}, 5), "add after drain")
}
