package main

import (
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBucketRangeContainsItsValues(t *testing.T) {
	values := []uint64{0, 1, 31, 32, 33, 63, 64, 65, 1000, 123456789, 1 << 40, math.MaxInt64}
	prev := -1
	for _, v := range values {
		i := bucketOf(v)
		require.Less(t, i, numBuckets, "bucket of %d in range", v)
		require.GreaterOrEqual(t, i, prev, "buckets grow with values (%d)", v)
		prev = i
		low, width := bucketRange(i)
		assert.LessOrEqual(t, low, v, "bucket %d of %d starts at or below it", i, v)
		assert.Greater(t, low+width, v, "bucket %d of %d ends above it", i, v)
		if v >= subCount {
			assert.LessOrEqual(t, float64(width)/float64(low), 1.0/subCount, "relative width of bucket %d is at most 1/%d", i, subCount)
		}
	}
}

func TestHistogramQuantilesAreWithinBucketError(t *testing.T) {
	var h histogram
	for i := 1; i <= 100_000; i++ {
		h.Record(time.Duration(i) * time.Microsecond)
	}
	require.EqualValues(t, 100_000, h.Count(), "every observation counted")
	tests := []struct {
		q    float64
		want time.Duration
	}{
		{q: 0.5, want: 50 * time.Millisecond},
		{q: 0.99, want: 99 * time.Millisecond},
		{q: 1, want: 100 * time.Millisecond},
	}
	for _, tt := range tests {
		got := h.Quantile(tt.q)
		assert.InEpsilon(t, float64(tt.want), float64(got), 0.04, "quantile %v", tt.q)
	}
	assert.Equal(t, 100*time.Millisecond, h.Max(), "max is exact")
}

func TestHistogramEmptyAndNegative(t *testing.T) {
	var h histogram
	assert.Zero(t, h.Quantile(0.99), "empty histogram has no quantile")
	h.Record(-time.Second)
	assert.EqualValues(t, 1, h.Count(), "negative durations are counted")
	assert.Zero(t, h.Quantile(0.5), "negative durations count as zero")
}

func TestHistogramRecordIsSafeForConcurrentUse(t *testing.T) {
	var h histogram
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				h.Record(time.Duration(g*1000+i) * time.Nanosecond)
			}
		})
	}
	wg.Wait()
	assert.EqualValues(t, 8000, h.Count(), "no observation lost under concurrency")
	assert.Equal(t, 7999*time.Nanosecond, h.Max(), "max is the largest observation")
}

func TestTrackerCountsUniqueDuplicatesAndForeign(t *testing.T) {
	tr := newTracker(130)
	for seq := range uint64(130) {
		tr.mark(seq)
	}
	select {
	case <-tr.done:
	default:
		t.Fatal("tracker must be done once every sequence number arrived")
	}
	tr.mark(5)
	tr.mark(129)
	tr.mark(130) // out of range
	assert.EqualValues(t, 130, tr.Unique(), "unique deliveries")
	assert.EqualValues(t, 2, tr.dups.Load(), "duplicates")
	assert.EqualValues(t, 132, tr.Delivered(), "delivered includes duplicates")
	assert.EqualValues(t, 1, tr.foreign.Load(), "out-of-range sequence is foreign")
}

// The bench handler records every message; these must stay at tens of ns.
func BenchmarkHistogramRecord(b *testing.B) {
	var h histogram
	b.RunParallel(func(pb *testing.PB) {
		d := time.Duration(1)
		for pb.Next() {
			h.Record(d)
			d = (d*3 + 7) & (1<<30 - 1)
		}
	})
}

func BenchmarkTrackerMark(b *testing.B) {
	const n = 1 << 20
	tr := newTracker(n)
	var seq atomic.Uint64
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			tr.mark(seq.Add(1) & (n - 1))
		}
	})
}

func TestHistogramP999ResolvesTheTail(t *testing.T) {
	var h histogram
	// 99.9% of observations at 1ms, the slowest 0.1% spread over 50-60ms.
	for range 99_900 {
		h.Record(time.Millisecond)
	}
	for i := range 100 {
		h.Record(50*time.Millisecond + time.Duration(i)*100*time.Microsecond)
	}
	assert.InEpsilon(t, float64(time.Millisecond), float64(h.Quantile(0.999)), 0.02, "p999 is the 99,900th observation")
	assert.InEpsilon(t, float64(55*time.Millisecond), float64(h.Quantile(0.9995)), 0.02, "the tail above p999 is resolved")
	h.Record(time.Hour) // 100,001 observations: the p999 rank, rounded up, is now in the tail
	assert.Greater(t, h.Quantile(0.999), 40*time.Millisecond, "p999 rounds its rank up")
}
