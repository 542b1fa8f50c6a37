package conformance

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	bus "github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
)

// Ping forwards to the backend's Pinger, when it has one.
func (c *countingBackend) Ping(ctx context.Context) error {
	p, ok := c.Backend.(backend.Pinger)
	if !ok {
		return fmt.Errorf("conformance: %w: %s has no backend.Pinger", bus.ErrUnsupported, c.Capabilities().Name)
	}
	return p.Ping(ctx)
}

// testPing: Bus.Ping answers nil on a live backend, also from many
// goroutines at once; a ctx that already ended fails it with ctx's error;
// after Close it fails with ErrClosed. A backend without a Pinger fails
// it with ErrUnsupported.
func testPing(t *testing.T, s *suite) {
	h := s.newHarness(t)
	ctx, cancel := context.WithTimeout(context.Background(), s.deadline())
	defer cancel()
	if _, ok := h.be.Backend.(backend.Pinger); !ok {
		require.ErrorIs(t, h.bus.Ping(ctx), bus.ErrUnsupported, "a backend without a Pinger cannot ping")
		return
	}
	require.NoError(t, h.bus.Ping(ctx), "the broker answers a ping")

	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = h.bus.Ping(ctx)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "concurrent ping %d", i)
	}

	ended, endedCancel := context.WithCancel(context.Background())
	endedCancel()
	require.ErrorIs(t, h.bus.Ping(ended), context.Canceled, "a ping whose ctx ended fails with ctx's error")

	short, shortCancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer shortCancel()
	<-short.Done()
	require.ErrorIs(t, h.bus.Ping(short), context.DeadlineExceeded, "a ping past its deadline fails with ctx's error")

	require.NoError(t, h.bus.Close(ctx), "close the bus")
	require.ErrorIs(t, h.bus.Ping(ctx), bus.ErrClosed, "a closed bus cannot ping")
}

// testSubscriptionHealth: a running subscription reports its Receives
// (LastReceive set and advancing, no error, not failing, not on
// standby), its group's lag once everything is handled (0, or Unknown
// where the backend cannot count it), and, once closed, that it no
// longer runs.
func testSubscriptionHealth(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic, group := h.topic("health"), h.group("health")
	var in inbox
	sub := h.subscribe(context.Background(), topic, in.handle(nil), bus.WithGroup(group))
	h.publishN(topic, "health", 5)
	s.eventually(t, func() bool { return in.len() >= 5 }, "the 5 messages are handled")

	var first time.Time
	s.eventually(t, func() bool {
		first = sub.Health().LastReceive
		return !first.IsZero()
	}, "a running subscription reports a Receive")
	s.eventually(t, func() bool { return sub.Health().LastReceive.After(first) },
		"LastReceive advances while the subscription fetches, with or without messages")
	hl := sub.Health()
	assert.True(t, hl.Running, "the subscription runs")
	assert.False(t, hl.Standby, "a lone subscription without key ordering fetches")
	assert.NoError(t, hl.LastError, "no Receive failed")
	assert.Zero(t, hl.Failing, "no Receive failed")
	assert.NoError(t, hl.Err)

	ctx, cancel := context.WithTimeout(context.Background(), s.deadline())
	defer cancel()
	if _, err := sub.Lag(ctx); err != nil {
		require.ErrorIs(t, err, bus.ErrUnsupported, "Lag fails only where the backend has no Inspector")
	} else {
		s.eventually(t, func() bool {
			lag, err := sub.Lag(ctx)
			return err == nil && (lag == 0 || !lag.Known())
		}, "the group has received everything: lag 0, or unknown")
	}

	h.closeSub(sub)
	hl = sub.Health()
	assert.False(t, hl.Running, "a closed subscription no longer runs")
	assert.NoError(t, hl.Err, "a clean Close is no failure")
}

// testSubscriptionHealthStandby: of two members of a key-ordered group,
// one holds the group lock and fetches, the other waits for it and says
// so (Standby); when the first closes, the second takes over and fetches.
func testSubscriptionHealthStandby(t *testing.T, s *suite) {
	h := s.newHarness(t)
	if _, ok := h.be.Backend.(backend.GroupLocker); !ok {
		t.Skipf("%s has no backend.GroupLocker: every member of a key-ordered group fetches", s.caps.Name)
	}
	topic, group := h.topic("standby"), h.group("standby")
	opts := []bus.SubscribeOption{bus.WithGroup(group), bus.WithKeyOrdering(), bus.WithAckTimeout(s.ackTimeout())}
	noop := func(context.Context, *bus.Delivery) error { return nil }
	a := h.subscribe(context.Background(), topic, noop, opts...)
	b := h.subscribe(context.Background(), topic, noop, opts...)
	s.eventually(t, func() bool {
		ha, hb := a.Health(), b.Health()
		return ha.Standby != hb.Standby
	}, "one member fetches, the other waits for the group lock")
	active, standby := a, b
	if a.Health().Standby {
		active, standby = b, a
	}
	s.eventually(t, func() bool { return !active.Health().LastReceive.IsZero() }, "the lock holder receives")
	h.closeSub(active)
	s.eventually(t, func() bool {
		hl := standby.Health()
		return !hl.Standby && !hl.LastReceive.IsZero()
	}, "the waiting member takes the lock over and receives")
	h.closeSub(standby)
}

// testSubscriptionHealthPartitioned: on a topic of 2 partitions shared by
// 3 members, the members that own a partition receive and the one that
// owns none says so (Standby); the group's lag, summed over the
// partitions, is 0 (or Unknown) once every message is handled.
func testSubscriptionHealthPartitioned(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic := h.partitionedTopic(t, "healthparts", 2)
	group := h.group("healthparts")
	var in inbox
	subs := make([]*bus.Subscription, 3)
	for i := range subs {
		subs[i] = h.subscribe(context.Background(), topic, in.handle(nil), bus.WithGroup(group), bus.WithAckTimeout(s.ackTimeout()))
	}
	s.eventually(t, func() bool {
		standby, receiving := 0, 0
		for _, sub := range subs {
			hl := sub.Health()
			if hl.Standby {
				standby++
			} else if !hl.LastReceive.IsZero() {
				receiving++
			}
		}
		return standby == 1 && receiving == 2
	}, "two members own a partition each and receive, the third owns none and waits")

	msgs := numbered("healthparts", 20)
	for i, m := range msgs {
		m.Key = fmt.Sprintf("k%d", i)
	}
	h.publish(topic, msgs...)
	requireBothPartitions(t, msgs)
	s.eventually(t, func() bool { return in.len() >= len(msgs) }, "every message is handled")
	ctx, cancel := context.WithTimeout(context.Background(), s.deadline())
	defer cancel()
	if _, err := subs[0].Lag(ctx); err != nil {
		require.ErrorIs(t, err, bus.ErrUnsupported, "Lag fails only where the backend has no Inspector")
	} else {
		s.eventually(t, func() bool {
			lag, err := subs[0].Lag(ctx)
			return err == nil && (lag == 0 || !lag.Known())
		}, "the group has received everything on both partitions: lag 0, or unknown")
	}
	for _, sub := range subs {
		h.closeSub(sub)
	}
	// With no member left, 6 more messages over both partitions are the
	// group's lag, summed.
	more := numbered("healthparts-more", 6)
	for i, m := range more {
		m.Key = fmt.Sprintf("k%d", i)
	}
	requireBothPartitions(t, more)
	h.publish(topic, more...)
	if lag, err := subs[0].Lag(ctx); err == nil && lag.Known() {
		s.eventually(t, func() bool {
			lag, err := subs[0].Lag(ctx)
			return err == nil && lag == bus.Figure(len(more))
		}, "the lag of the group is summed over its partitions")
	}
}

// requireBothPartitions checks that the keys of msgs reach both partitions
// of a 2-partition topic.
func requireBothPartitions(t *testing.T, msgs []*bus.Message) {
	t.Helper()
	seen := map[int]bool{}
	for _, m := range msgs {
		seen[backend.PartitionOf(m.Key, m.ID, 2)] = true
	}
	require.Len(t, seen, 2, "the keys reach both partitions")
}
