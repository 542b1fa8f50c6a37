package autoscale

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// steps feeds p the same sample n times and returns the reasons of its
// changes.
func steps(p *policy, s sample, n int) []string {
	var out []string
	for range n {
		if r := p.step(s); r != "" {
			out = append(out, r)
		}
	}
	return out
}

func TestPolicyDoublesOnAGrowingBacklogUpToMax(t *testing.T) {
	p := &policy{min: 1, max: 64, bound: 1}
	reasons := steps(p, sample{lag: 100000, lagKnown: true, done: 50, latency: time.Millisecond}, 10)
	require.Equal(t, 64, p.bound, "the bound reaches max")
	require.Len(t, reasons, 6, "1 -> 64 takes six doublings")
	for _, r := range reasons {
		require.Equal(t, ReasonBacklog, r)
	}
}

func TestPolicyHoldsWhileTheBacklogDrainsFastEnough(t *testing.T) {
	p := &policy{min: 1, max: 64, bound: 8, prevLag: 5000}
	// The lag falls and would drain in fewer than PaceTicks ticks.
	require.Empty(t, p.step(sample{lag: 4000, lagKnown: true, done: 1000, latency: time.Millisecond}), "no decision")
	require.Equal(t, 8, p.bound)
}

func TestPolicyHalvesToMinAfterCalmTicks(t *testing.T) {
	p := &policy{min: 2, max: 64, bound: 32}
	calm := sample{lag: 0, lagKnown: true}
	require.Empty(t, steps(p, calm, CalmTicks-1), "no decision before a calm spell")
	reasons := steps(p, calm, 10*CalmTicks)
	require.Equal(t, 2, p.bound, "the bound ends at min")
	require.Equal(t, []string{ReasonDrained, ReasonDrained, ReasonDrained, ReasonDrained}, reasons, "32 -> 2 takes four halvings")
}

func TestPolicyKeepsAUsedBoundWhenTheLagIsSmall(t *testing.T) {
	p := &policy{min: 1, max: 64, bound: 16}
	// Ten handlers busy of sixteen: the bound is used.
	require.Empty(t, steps(p, sample{lag: 3, lagKnown: true, done: 1000, latency: time.Millisecond, busy: 10}, 5*CalmTicks))
	require.Equal(t, 16, p.bound)
}

func TestPolicyShrinksOnALatencyRiseAndCoolsDown(t *testing.T) {
	p := &policy{min: 1, max: 32, bound: 32}
	backlog := sample{lag: 100000, lagKnown: true, done: 100, latency: time.Millisecond}
	require.Empty(t, p.step(backlog), "at max already, the first sample sets the baseline")
	slow := backlog
	slow.latency = 5 * time.Millisecond
	require.Equal(t, ReasonLatency, p.step(slow), "a marked rise of latency shrinks the bound")
	require.Equal(t, 24, p.bound, "by a quarter")
	require.Empty(t, steps(p, backlog, CooldownTicks-1), "no growth during the cooldown")
	require.Equal(t, ReasonBacklog, p.step(backlog), "growth resumes after it")
	require.Equal(t, 32, p.bound, "up to max")
}

func TestPolicyIgnoresLatencyOfTooFewHandlers(t *testing.T) {
	p := &policy{min: 1, max: 64, bound: 8, baseline: time.Millisecond}
	require.NotEqual(t, ReasonLatency, p.step(sample{done: minSamples - 1, latency: time.Second}), "too few samples to judge")
	require.Equal(t, 8, p.bound)
}

func TestPolicyWithoutLagFollowsLatencyOnly(t *testing.T) {
	p := &policy{min: 1, max: 64, bound: 4}
	require.Empty(t, steps(p, sample{lag: -1, done: 100, latency: time.Millisecond}, 3*CalmTicks), "no lag, no backlog decisions")
	require.Equal(t, 4, p.bound)
}

func TestControllerGrowsItsBoundAndStops(t *testing.T) {
	defer SetTickForTest(time.Millisecond)()
	decided := make(chan Decision, 64)
	c := New(Config{Min: 1, Max: 4,
		Lag:    func(context.Context) (int64, bool) { return 1000, true },
		Report: func(d Decision) { decided <- d }})
	c.Start()
	defer c.Stop()
	for c.Bound() < 4 {
		select {
		case d := <-decided:
			require.Equal(t, ReasonBacklog, d.Reason, "grown for the backlog")
			require.Equal(t, int64(1000), d.Backlog, "the decision carries the backlog")
		case <-time.After(10 * time.Second):
			t.Fatal("the controller did not grow to its max within 10s")
		}
	}
	n, err := c.Acquire(context.Background(), 10)
	require.NoError(t, err)
	require.Equal(t, 4, n, "Acquire takes up to the bound")
	c.Release(n)
	c.Stop()
	c.Stop()
}

func TestControllerStopBeforeStartStartsNothing(t *testing.T) {
	c := New(Config{Min: 1, Max: 4, Lag: func(context.Context) (int64, bool) { return 0, false }, Report: func(Decision) {}})
	c.Stop()
	c.Start()
	require.Equal(t, 1, c.Bound(), "the bound stays at min")
}

func TestControllerStopCancelsABacklogReadInProgress(t *testing.T) {
	defer SetTickForTest(time.Millisecond)()
	reading := make(chan struct{}, 1)
	c := New(Config{Min: 1, Max: 4, Report: func(Decision) {}, Lag: func(ctx context.Context) (int64, bool) {
		select {
		case reading <- struct{}{}:
		default:
		}
		<-ctx.Done() // a backend that hangs until its ctx ends
		return 0, false
	}})
	c.Start()
	select {
	case <-reading:
	case <-time.After(10 * time.Second):
		t.Fatal("the controller never read the backlog")
	}
	stopped := make(chan struct{})
	go func() { c.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("Stop waited for a hanging backlog read")
	}
}
