package bus

import (
	"context"
	"fmt"
	"time"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/autoscale"
	"github.com/eventbus-go/bus/internal/lifecycle"
	"github.com/eventbus-go/bus/observer"
)

// WithAutoscale lets the subscription's in-flight bound move between min
// and max (1 <= min <= max): it starts at min, doubles while the group's
// backlog (its lag, as Groups reports it) grows or stays high and handler
// latency holds, shrinks by a quarter when handler latency rises markedly
// (handlers are then the bottleneck), and halves once the backlog is
// drained and the bound is not used. The group's lag is read about every
// 100 ms through the backend's Inspector; on a backend without one, or
// where the lag is unknown, the bound follows latency only. Each decision
// is reported to the observer as an event of observer.ScopeScale (a
// notice with a nil Err; otelbus.Observer records the bound as a gauge),
// and with WithEvents written as a "scaled" lifecycle event, which
// `bus groups --events` and the dashboard read.
//
// It replaces WithMaxInFlight: giving both is an error. A WithLimiter
// limiter applies on top of the bound, as it does on top of max in flight.
// On a partitioned topic the bound is the member's, shared by the
// partitions it owns, and the backlog is the group's over all partitions.
func WithAutoscale(min, max int) SubscribeOption {
	return subOptionFunc(func(s *subscribeOptions) error {
		if min < 1 || max < min || max > maxInFlightUpperBound {
			return fmt.Errorf("%w: autoscale %d..%d, want 1 <= min <= max <= %d", ErrInvalidOption, min, max, maxInFlightUpperBound)
		}
		s.autoscaleMin, s.autoscaleMax = min, max
		return nil
	})
}

// autoscaler returns the controller of s, an autoscaled subscription to
// a topic of n partitions, or nil when o does not autoscale.
func (b *Bus) autoscaler(s *Subscription, n int, o subscribeOptions) *autoscale.Controller {
	if o.autoscaleMax == 0 {
		return nil
	}
	topic := s.topic
	lag := func(context.Context) (int64, bool) { return 0, false }
	if in, ok := b.be.(backend.Inspector); ok {
		lag = func(ctx context.Context) (int64, bool) { return groupLag(ctx, in, topic, n, o.group) }
	}
	return autoscale.New(autoscale.Config{
		Min: o.autoscaleMin, Max: o.autoscaleMax, Lag: lag,
		Report: func(d autoscale.Decision) {
			b.opts.observer.Observe(context.Background(), observer.Event{
				Scope: observer.ScopeScale, Topic: topic, Group: o.group,
				Scale: &observer.Scale{From: d.From, To: d.To, Reason: d.Reason, Backlog: d.Backlog},
			})
			b.emitScaled(s, d)
		},
	})
}

// emitScaled writes the scaled event of decision d of s when lifecycle
// events are on (and s is not on the events topic itself).
func (b *Bus) emitScaled(s *Subscription, d autoscale.Decision) {
	if b.events == nil || s.topic == b.opts.events {
		return
	}
	b.events.Emit(lifecycle.Event{Kind: lifecycle.Scaled, Time: time.Now(),
		Topic: s.topic, Group: s.group, Member: s.member, Bound: d.To, Reason: d.Reason})
}

// groupLag sums the lag of group over the n partitions of topic (the topic
// itself when n is 1); false when any is unknown.
func groupLag(ctx context.Context, in backend.Inspector, topic string, n int, group string) (int64, bool) {
	var sum int64
	for p := range n {
		t := topic
		if n > 1 {
			t = backend.PartitionTopic(topic, p)
		}
		g, ok := groupInfo(ctx, in, t, group)
		if !ok || !g.Lag.Known() {
			return 0, false
		}
		sum += int64(g.Lag)
	}
	return sum, true
}

// groupInfo returns the Inspector's figures of group on topic; false when
// it cannot tell.
func groupInfo(ctx context.Context, in backend.Inspector, topic, group string) (backend.GroupInfo, bool) {
	gs, err := in.Groups(ctx, topic)
	if err != nil {
		return backend.GroupInfo{}, false
	}
	for _, g := range gs {
		if g.Name == group {
			return g, true
		}
	}
	return backend.GroupInfo{}, false
}

// scale makes cfg's in-flight bound ctrl's: the consumer's own slots
// stay at the maximum, ctrl limits below them (after any WithLimiter
// limiter), and ctrl hears each handler's latency.
func (cfg *consumerConfig) scale(ctrl *autoscale.Controller) {
	if cfg.Limiter != nil {
		cfg.Limiter = chainLimiter{cfg.Limiter, ctrl}
	} else {
		cfg.Limiter = ctrl
	}
	cfg.Feedback = append(cfg.Feedback, ctrl)
}

// stopThen returns ended preceded by stopping ctrl, so that a subscription
// is not done before its controller is; ended alone when ctrl is nil.
func stopThen(ctrl *autoscale.Controller, ended func()) func() {
	if ctrl == nil {
		return ended
	}
	return func() {
		ctrl.Stop()
		ended()
	}
}
