package main

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// histogram records durations in log-linear buckets: values below 2^subBits
// nanoseconds get a bucket each, and every power-of-two range above is split
// into 2^subBits equal sub-buckets, so a quantile is off by at most about
// 3%. Record is lock-free (one atomic add plus a rarely contended max) and
// safe for concurrent use; the whole histogram is about 15 KiB.
type histogram struct {
	counts [numBuckets]atomic.Uint64
	max    atomic.Int64
}

const (
	subBits    = 5
	subCount   = 1 << subBits
	numBuckets = (64 - subBits) << subBits
)

// bucketOf returns the bucket index of v nanoseconds.
func bucketOf(v uint64) int {
	if v < subCount {
		return int(v)
	}
	exp := bits.Len64(v) - subBits - 1
	return (exp+1)<<subBits + int(v>>exp) - subCount
}

// bucketRange returns the lowest value of bucket i and its width.
func bucketRange(i int) (low, width uint64) {
	if i < subCount {
		return uint64(i), 1
	}
	exp := i>>subBits - 1
	mant := uint64(i&(subCount-1)) + subCount
	return mant << exp, 1 << exp
}

// Record adds one observation. Negative durations count as zero.
func (h *histogram) Record(d time.Duration) {
	v := int64(d)
	if v < 0 {
		v = 0
	}
	h.counts[bucketOf(uint64(v))].Add(1)
	for {
		m := h.max.Load()
		if v <= m || h.max.CompareAndSwap(m, v) {
			return
		}
	}
}

// Count returns the number of observations.
func (h *histogram) Count() uint64 {
	var n uint64
	for i := range h.counts {
		n += h.counts[i].Load()
	}
	return n
}

// Quantile returns the q-quantile (0 < q <= 1) as the midpoint of its
// bucket, capped at the largest observation; 0 when nothing was recorded.
func (h *histogram) Quantile(q float64) time.Duration {
	total := h.Count()
	if total == 0 {
		return 0
	}
	rank := uint64(q * float64(total))
	if float64(rank) < q*float64(total) {
		rank++
	}
	rank = max(rank, 1)
	var seen uint64
	for i := range h.counts {
		seen += h.counts[i].Load()
		if seen >= rank {
			low, width := bucketRange(i)
			return min(time.Duration(low+width/2), h.Max())
		}
	}
	return h.Max()
}

// Max returns the largest observation.
func (h *histogram) Max() time.Duration { return time.Duration(h.max.Load()) }
