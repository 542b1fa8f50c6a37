package bus

import (
	"context"
	"fmt"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/eventbus-go/bus/internal/slots"
)

// Limiter decides how many messages a subscription may take. The bus
// acquires capacity BEFORE it asks the backend for messages, so nothing
// waits in a local buffer while its lease runs out; one limiter may be
// shared by several subscriptions to cap a whole process.
//
// Implementations must be safe for concurrent use. A limiter that also has
// a Feedback(latency time.Duration, err error) method (as
// NewAdaptiveLimiter's does) is told each handler's latency and error,
// before Release.
type Limiter interface {
	// Acquire blocks until at least one unit is free, then takes between
	// 1 and max units and returns how many it took. It returns ctx.Err()
	// when ctx ends first.
	Acquire(ctx context.Context, max int) (int, error)
	// Release returns n units taken by Acquire.
	Release(n int)
}

// concurrencyLimiter caps the units held at once. Safe for concurrent use.
type concurrencyLimiter struct{ slots *slots.Pool }

// NewConcurrencyLimiter returns a limiter with limit units (limit >= 1).
// Share one between subscriptions to cap a whole process; its InUse and
// Limit methods report the units held and the limit.
func NewConcurrencyLimiter(limit int) Limiter {
	if limit < 1 {
		panic(fmt.Sprintf("bus: concurrency limit %d, want >= 1", limit))
	}
	return &concurrencyLimiter{slots: slots.New(limit)}
}

// Acquire implements Limiter.
func (l *concurrencyLimiter) Acquire(ctx context.Context, max int) (int, error) {
	return l.slots.Acquire(ctx, 1, max, nil)
}

// Release implements Limiter.
func (l *concurrencyLimiter) Release(n int) { l.slots.Release(n) }

// InUse returns the units held now.
func (l *concurrencyLimiter) InUse() int { return l.slots.InUse() }

// Limit returns the current limit.
func (l *concurrencyLimiter) Limit() int { return l.slots.Limit() }

// rateLimiter lets at most r messages per second start, with bursts of up
// to burst. Units are not held: Release is a no-op. Safe for concurrent
// use.
type rateLimiter struct{ lim *rate.Limiter }

// NewRateLimiter returns a limiter of r messages per second and the given
// burst (>= 1).
func NewRateLimiter(r rate.Limit, burst int) Limiter {
	if burst < 1 {
		panic(fmt.Sprintf("bus: rate limiter burst %d, want >= 1", burst))
	}
	return &rateLimiter{lim: rate.NewLimiter(r, burst)}
}

// Acquire waits for one token, then takes as many more as are free now,
// up to max.
func (l *rateLimiter) Acquire(ctx context.Context, max int) (int, error) {
	if err := l.lim.Wait(ctx); err != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		return 0, err
	}
	n := 1
	now := time.Now()
	for n < max && l.lim.AllowN(now, 1) {
		n++
	}
	return n, nil
}

// Release implements Limiter; rate tokens are spent, not held.
func (l *rateLimiter) Release(int) {}

// AdaptiveConfig configures the limiter of NewAdaptiveLimiter. Zero fields take defaults.
type AdaptiveConfig struct {
	Initial int           // starting limit (default 16)
	Min     int           // floor (default 1)
	Max     int           // ceiling (default 1024)
	Target  time.Duration // handler latency above which the limit shrinks (default 100ms)
	// Decrease is the factor applied on an error or slow handler (default 0.9).
	Decrease float64
}

// adaptiveLimiter is a concurrency limiter whose limit grows by one per
// window of fast successes (additive increase) and shrinks by a factor on
// errors or latency over target (multiplicative decrease), like TCP
// congestion control. Safe for concurrent use.
type adaptiveLimiter struct {
	*concurrencyLimiter
	cfg AdaptiveConfig

	mu    sync.Mutex
	limit float64
}

// NewAdaptiveLimiter returns a concurrency limiter whose limit grows by one
// per window of fast successes (additive increase) and shrinks by a factor
// on errors or latency over target (multiplicative decrease), like TCP
// congestion control; it takes feedback, and its Limit method
// reports the current limit. Invalid configuration panics, like a bad
// regexp.
func NewAdaptiveLimiter(cfg AdaptiveConfig) Limiter {
	if cfg.Initial == 0 {
		cfg.Initial = 16
	}
	if cfg.Min == 0 {
		cfg.Min = 1
	}
	if cfg.Max == 0 {
		cfg.Max = 1024
	}
	if cfg.Target == 0 {
		cfg.Target = 100 * time.Millisecond
	}
	if cfg.Decrease == 0 {
		cfg.Decrease = 0.9
	}
	if cfg.Min < 1 || cfg.Max < cfg.Min || cfg.Initial < cfg.Min || cfg.Initial > cfg.Max || cfg.Decrease <= 0 || cfg.Decrease >= 1 || cfg.Target < 0 {
		panic(fmt.Sprintf("bus: invalid adaptive limiter config %+v", cfg))
	}
	return &adaptiveLimiter{
		concurrencyLimiter: NewConcurrencyLimiter(cfg.Initial).(*concurrencyLimiter),
		cfg:                cfg,
		limit:              float64(cfg.Initial),
	}
}

// Feedback adapts the limit to one handled message.
func (l *adaptiveLimiter) Feedback(latency time.Duration, err error) {
	l.mu.Lock()
	if err != nil || latency > l.cfg.Target {
		l.limit *= l.cfg.Decrease
	} else {
		l.limit += 1 / l.limit
	}
	l.limit = max(float64(l.cfg.Min), min(float64(l.cfg.Max), l.limit))
	n := int(l.limit)
	l.mu.Unlock()
	if n != l.concurrencyLimiter.Limit() {
		l.concurrencyLimiter.slots.SetLimit(n)
	}
}
