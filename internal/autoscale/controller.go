package autoscale

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eventbus-go/bus/internal/slots"
)

// DefaultTick is how often a controller reads the backlog and decides.
const DefaultTick = 100 * time.Millisecond

// tickOverride, when set (tests), replaces DefaultTick for the controllers
// made afterwards.
var tickOverride atomic.Int64

// SetTickForTest makes the controllers created until restore is called
// tick every d, so that tests see decisions in milliseconds.
func SetTickForTest(d time.Duration) (restore func()) {
	old := tickOverride.Swap(int64(d))
	return func() { tickOverride.Store(old) }
}

// fetchLinger is how long Acquire waits for a quarter of the bound to
// free up before it takes fewer units (as a subscription's own in-flight
// slots do), so that a saturated subscription fetches in batches.
const fetchLinger = 2 * time.Millisecond

// lagTimeout bounds one read of the backlog.
const lagTimeout = 5 * time.Second

// Decision is one change of the bound.
type Decision struct {
	From, To int
	Reason   string
	Backlog  int64
}

// Config configures a Controller.
type Config struct {
	Min, Max int // 1 <= Min <= Max
	// Lag reads the group's backlog: the messages it has not received
	// yet, and false when the backend cannot tell.
	Lag func(ctx context.Context) (int64, bool)
	// Report is told every decision, on the controller's goroutine.
	Report func(Decision)
}

// Controller is a concurrency limiter (a bus.Limiter, with
// feedback) whose bound it moves by the package's policy.
type Controller struct {
	cfg   Config
	tick  time.Duration
	slots *slots.Pool

	done    atomic.Int64 // handlers finished since the last tick
	latency atomic.Int64 // their total latency, in nanoseconds

	// ctx ends when Stop is called; it bounds the backlog reads.
	ctx                 context.Context
	stop                context.CancelFunc
	startOnce, stopOnce sync.Once
	stopped             chan struct{}
}

// New returns a controller at cfg.Min, not yet running.
func New(cfg Config) *Controller {
	tick := DefaultTick
	if d := tickOverride.Load(); d > 0 {
		tick = time.Duration(d)
	}
	c := &Controller{cfg: cfg, tick: tick, slots: slots.New(cfg.Min), stopped: make(chan struct{})}
	c.ctx, c.stop = context.WithCancel(context.Background())
	return c
}

// Acquire takes between 1 and most units of the bound; it waits for a
// quarter of the bound, briefly, before it takes fewer.
func (c *Controller) Acquire(ctx context.Context, most int) (int, error) {
	need := min(most, max(1, c.slots.Limit()/4))
	if n := c.slots.TryAcquire(need, most); n > 0 {
		return n, nil
	}
	t := time.NewTimer(fetchLinger)
	defer t.Stop()
	return c.slots.Acquire(ctx, need, most, t.C)
}

// Release gives back n units.
func (c *Controller) Release(n int) { c.slots.Release(n) }

// Feedback records one handler's latency.
func (c *Controller) Feedback(latency time.Duration, _ error) {
	c.latency.Add(int64(latency))
	c.done.Add(1)
}

// Bound returns the current bound.
func (c *Controller) Bound() int { return c.slots.Limit() }

// Start runs the controller's goroutine; later calls do nothing.
func (c *Controller) Start() {
	c.startOnce.Do(func() { go c.run() })
}

// Stop ends the controller's goroutine and waits for it; it may be called
// more than once, and before Start.
func (c *Controller) Stop() {
	c.stopOnce.Do(func() {
		c.stop()
		c.startOnce.Do(func() { close(c.stopped) })
	})
	<-c.stopped
}

func (c *Controller) run() {
	defer close(c.stopped)
	p := &policy{min: c.cfg.Min, max: c.cfg.Max, bound: c.cfg.Min}
	t := time.NewTicker(c.tick)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-c.ctx.Done():
			return
		case now := <-t.C:
			s := c.sample(c.ctx, now.Sub(last))
			last = now
			from := p.bound
			if reason := p.step(s); reason != "" {
				c.slots.SetLimit(p.bound)
				c.cfg.Report(Decision{From: from, To: p.bound, Reason: reason, Backlog: max(s.lag, 0)})
			}
		}
	}
}

// sample reads the backlog and takes the feedback of the tick that lasted
// elapsed.
func (c *Controller) sample(ctx context.Context, elapsed time.Duration) sample {
	var s sample
	lctx, cancel := context.WithTimeout(ctx, min(lagTimeout, max(c.tick, time.Second)))
	s.lag, s.lagKnown = c.cfg.Lag(lctx)
	cancel()
	if !s.lagKnown {
		s.lag = -1
	}
	s.done = c.done.Swap(0)
	total := time.Duration(c.latency.Swap(0))
	if s.done > 0 {
		s.latency = total / time.Duration(s.done)
	}
	if elapsed > 0 {
		s.busy = float64(total) / float64(elapsed)
	}
	return s
}
