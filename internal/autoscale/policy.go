package autoscale

import "time"

// Tuning of the policy (see the package doc).
const (
	// RiseFactor is how many times the baseline latency the mean of a
	// tick must exceed to count as a marked rise.
	RiseFactor = 2
	// CooldownTicks is how long the bound does not grow after a latency
	// decrease.
	CooldownTicks = 10
	// PaceTicks: a lag that would take longer than this many ticks to
	// drain at the pace of the last tick is high.
	PaceTicks = 5
	// CalmTicks is how many calm ticks in a row halve the bound.
	CalmTicks = 10
	// minSamples is how many handlers must finish in a tick for its mean
	// latency to count.
	minSamples = 8
	// baselineDrift is the fraction of the gap to a higher mean the
	// baseline moves each tick, so that a lasting change of the handlers'
	// own latency stops counting as a rise.
	baselineDrift = 32
)

// Reasons of a decision.
const (
	ReasonBacklog = "backlog"
	ReasonDrained = "drained"
	ReasonLatency = "latency"
)

// sample is what one tick observed.
type sample struct {
	lag      int64         // the group's lag; < 0 when unknown
	done     int64         // handlers that finished during the tick
	latency  time.Duration // their mean latency
	busy     float64       // handlers running on average during the tick
	lagKnown bool
}

// policy decides the bound from the samples. Not safe for concurrent use:
// only the controller's goroutine steps it.
type policy struct {
	min, max int
	bound    int
	prevLag  int64
	baseline time.Duration
	cooldown int
	calm     int
}

// step takes one sample and returns the reason of a change of p.bound, or
// "" when the bound stays.
func (p *policy) step(s sample) string {
	if p.cooldown > 0 {
		p.cooldown--
	}
	if p.latencyRose(s) && p.bound > p.min {
		p.bound = max(p.min, p.bound-max(1, p.bound/4))
		p.cooldown, p.calm = CooldownTicks, 0
		return ReasonLatency
	}
	if !s.lagKnown {
		return ""
	}
	growing := s.lag >= p.prevLag
	p.prevLag = s.lag
	if s.lag > int64(p.bound) && (growing || s.lag > PaceTicks*s.done) {
		p.calm = 0
		if p.cooldown > 0 || p.bound >= p.max {
			return ""
		}
		p.bound = min(p.max, 2*p.bound)
		return ReasonBacklog
	}
	if s.lag > int64(p.bound) || s.busy >= float64(p.bound)/2 {
		p.calm = 0
		return ""
	}
	p.calm++
	if p.calm < CalmTicks || p.bound <= p.min {
		return ""
	}
	p.calm = 0
	p.bound = max(p.min, p.bound/2)
	return ReasonDrained
}

// latencyRose reports whether the mean latency of s rose markedly over
// the baseline, and updates the baseline.
func (p *policy) latencyRose(s sample) bool {
	if s.done < minSamples {
		return false
	}
	rose := p.baseline > 0 && s.latency > RiseFactor*p.baseline
	switch {
	case p.baseline == 0 || s.latency < p.baseline:
		p.baseline = s.latency
	default:
		p.baseline += (s.latency - p.baseline) / baselineDrift
	}
	return rose
}
