package redisstream

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReclaimerScansAtEachDueTimeUntilServed: a give-back's due time makes
// a scan due then; a pass that started after a due time serves it, and
// the next scan is due at the earliest due time left, not after the
// periodic interval.
func TestReclaimerScansAtEachDueTimeUntilServed(t *testing.T) {
	r := &reclaimer{}
	require.Equal(t, "0-0", r.cursor(), "a first pass starts at the head")
	r.scanned("0-0", time.Second)
	now := time.Now()
	require.InDelta(t, time.Second, r.until(now), float64(50*time.Millisecond), "with nothing given back, the next scan is the periodic one")

	first, second := now.Add(100*time.Millisecond), now.Add(300*time.Millisecond)
	r.dueAt(second)
	r.dueAt(first)
	assert.InDelta(t, 100*time.Millisecond, r.until(now), float64(5*time.Millisecond), "the scan is due at the earliest due time")

	// A pass that starts after the first due time, in two calls.
	later := first.Add(time.Millisecond)
	require.Zero(t, r.until(later), "the scan is due after the first due time")
	r.cursor()
	r.mu.Lock()
	r.pass = later
	r.mu.Unlock()
	r.scanned("5-0", time.Second)
	assert.Zero(t, r.until(later), "a pass that has not reached the end of the pending list stays due")
	assert.Equal(t, "5-0", r.cursor(), "and goes on from its cursor")
	r.scanned("0-0", time.Second)
	assert.InDelta(t, 300*time.Millisecond, r.until(now), float64(20*time.Millisecond),
		"after the pass, the next scan is due at the second due time, which the pass did not serve")

	// A pass after the second due time serves it too.
	r.cursor()
	r.mu.Lock()
	r.pass = second.Add(time.Millisecond)
	r.mu.Unlock()
	r.scanned("0-0", time.Second)
	assert.InDelta(t, time.Second, r.until(time.Now()), float64(50*time.Millisecond), "every due time served: the periodic scan again")
	assert.Empty(t, r.dues, "no due time is kept once served")
}

// TestReclaimerWakesABlockedReadAtTheDueTime: a read registered as
// blocking past a due time is woken at that time, not before and not at
// its end; one ending before the due time is left alone.
func TestReclaimerWakesABlockedReadAtTheDueTime(t *testing.T) {
	r := &reclaimer{}
	r.scanned("0-0", time.Second)
	start := time.Now()
	long, wakeLong := context.WithCancelCause(context.Background())
	defer wakeLong(nil)
	short, wakeShort := context.WithCancelCause(context.Background())
	defer wakeShort(nil)
	brLong := r.waitRead(start.Add(time.Second), wakeLong)
	brShort := r.waitRead(start.Add(20*time.Millisecond), wakeShort)
	due := start.Add(150 * time.Millisecond)
	r.dueAt(due)
	select {
	case <-long.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the read blocked past the due time was not woken")
	}
	woke := time.Now()
	assert.False(t, woke.Before(due), "woken %v before the due time", due.Sub(woke))
	assert.True(t, errors.Is(context.Cause(long), errWoken), "the read's ctx ends with errWoken, got %v", context.Cause(long))
	assert.NoError(t, short.Err(), "a read that ends before the due time is not woken")
	r.readDone(brLong)
	r.readDone(brShort)
	assert.Empty(t, r.reads, "returned reads are unregistered")
}

// TestReclaimerBoundsItsDueTimes: past maxDues due times the reclaimer
// keeps no more, and scans every overflowPoll until the last dropped one
// has passed.
func TestReclaimerBoundsItsDueTimes(t *testing.T) {
	r := &reclaimer{}
	r.scanned("0-0", time.Second)
	far := time.Now().Add(time.Hour)
	for range maxDues + 10 {
		r.dueAt(far)
	}
	assert.Len(t, r.dues, maxDues, "at most maxDues due times are kept")
	r.cursor()
	r.scanned("0-0", time.Second)
	assert.LessOrEqual(t, r.until(time.Now()), overflowPoll, "while due times were dropped, scans come every %v", overflowPoll)
}
