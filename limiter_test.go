package bus_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"strconv"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/eventbus-go/bus"
)

func TestConcurrencyLimiterNeverHandsOutMoreThanLimit(t *testing.T) {
	l := bus.NewConcurrencyLimiter(4)
	var held, peak atomic.Int32
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				n, err := l.Acquire(context.Background(), 3)
				if err != nil {
					t.Error(err)
					return
				}
				v := held.Add(int32(n))
				for p := peak.Load(); v > p && !peak.CompareAndSwap(p, v); p = peak.Load() {
				}
				held.Add(-int32(n))
				l.Release(n)
			}
		}()
	}
	wg.Wait()
	assert.LessOrEqual(t, int(peak.Load()), 4, "units held at once")
	assert.Zero(t, l.(interface{ InUse() int }).InUse())
}

func TestConcurrencyLimiterAcquireTakesUpToMaxAndHonoursCtx(t *testing.T) {
	l := bus.NewConcurrencyLimiter(5)
	n, err := l.Acquire(context.Background(), 3)
	require.NoError(t, err)
	assert.Equal(t, 3, n)
	n, err = l.Acquire(context.Background(), 10)
	require.NoError(t, err)
	assert.Equal(t, 2, n, "only the free units are taken")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		_, err := l.Acquire(ctx, 1)
		done <- err
	}()
	cancel()
	assert.ErrorIs(t, recv(t, done), context.Canceled)
	got := make(chan int)
	go func() {
		n, _ := l.Acquire(context.Background(), 4)
		got <- n
	}()
	l.Release(2)
	assert.Equal(t, 2, recv(t, got), "a waiter wakes on release")
}

func TestRateLimiterSpacesAcquisitions(t *testing.T) {
	l := bus.NewRateLimiter(rate.Limit(100), 1)
	start := time.Now()
	total := 0
	for total < 21 {
		n, err := l.Acquire(context.Background(), 5)
		require.NoError(t, err)
		total += n
	}
	// 1 burst token plus 20 at 100/s take at least ~200ms.
	assert.GreaterOrEqual(t, time.Since(start), 180*time.Millisecond, "the rate is respected")
}

func TestAdaptiveLimiterShrinksOnErrorsAndGrowsOnSuccess(t *testing.T) {
	l, ok := bus.NewAdaptiveLimiter(bus.AdaptiveConfig{Initial: 10, Min: 2, Max: 20, Target: time.Second}).(interface {
		Feedback(time.Duration, error)
		Limit() int
	})
	require.True(t, ok, "the adaptive limiter takes feedback and reports its limit")
	for range 20 {
		l.Feedback(time.Millisecond, errors.New("x"))
	}
	assert.Equal(t, 2, l.Limit(), "errors shrink the limit to the floor")
	for range 500 {
		l.Feedback(time.Millisecond, nil)
	}
	assert.Greater(t, l.Limit(), 10, "fast successes grow the limit")
	assert.LessOrEqual(t, l.Limit(), 20, "never above the ceiling")
	for range 50 {
		l.Feedback(2*time.Second, nil)
	}
	assert.Equal(t, 2, l.Limit(), "slow handlers shrink the limit")
}

func TestSaturatedSubscriptionFetchesInBatches(t *testing.T) {
	const limit = 16
	f := newFakeBackend()
	b := bus.New(f, bus.WithAckBatch(64, time.Millisecond))
	defer b.Close(context.Background())
	_, err := b.Subscribe(context.Background(), "orders", func(context.Context, *bus.Delivery) error {
		time.Sleep(50 * time.Microsecond) // work, not synchronisation
		return nil
	}, bus.WithMaxInFlight(limit))
	require.NoError(t, err)
	const total = 2000
	for i := range total {
		f.push(msg(strconv.Itoa(i), 1))
	}
	require.Eventually(t, func() bool { a, _, _ := f.snapshot(); return len(a) == total }, 10*time.Second, time.Millisecond)
	calls := f.receiveCalls()
	// One message per freed slot would take about total calls; waiting for
	// a quarter of the capacity keeps it near total/(limit/4).
	assert.Less(t, len(calls), total/2, "a saturated subscription fetches in batches (%d Receive calls)", len(calls))
}
