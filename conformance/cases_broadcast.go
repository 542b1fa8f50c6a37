package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	bus "github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/testkit/crashtest"
)

// DeleteGroup forwards to the backend's GroupDeleter, when it has one.
func (c *countingBackend) DeleteGroup(ctx context.Context, topic, group string) error {
	d, ok := c.Backend.(backend.GroupDeleter)
	if !ok {
		return fmt.Errorf("conformance: %w: %s has no backend.GroupDeleter", bus.ErrUnsupported, c.Capabilities().Name)
	}
	return d.DeleteGroup(ctx, topic, group)
}

// broadcastExpiry is the expiry of a broadcast subscription that dies:
// the shortest the bus allows, scaled.
func (s *suite) broadcastExpiry() time.Duration { return s.cfg.dur(time.Second) }

// sweeperExpiry is the expiry of the broadcast subscription that
// outlives it: long enough that a loaded machine never stalls its
// renewals past half of it, short enough that it sweeps every 1.5s.
func (s *suite) sweeperExpiry() time.Duration { return s.cfg.dur(3 * time.Second) }

// groupNames lists the names of topic's groups, as the backend's
// inspection reports them.
func (h *harness) groupNames(topic string) []string {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), h.s.deadline())
	defer cancel()
	groups, err := h.be.Groups(ctx, topic)
	require.NoError(h.t, err, "list the groups of %q", topic)
	names := make([]string, len(groups))
	for i, g := range groups {
		names[i] = g.Name
	}
	return names
}

// waitGroupGone waits until the backend's inspection no longer lists
// group on topic, polling every 50ms until the deadline, and returns how
// long it took.
func (h *harness) waitGroupGone(topic, group, why string) time.Duration {
	h.t.Helper()
	start := time.Now()
	deadline := start.Add(h.s.deadline())
	for {
		names := h.groupNames(topic)
		if !slices.Contains(names, group) {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("%s: group %q still listed after %v: %v", why, group, h.s.deadline(), names)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// testBroadcastEveryMessage: three broadcast subscriptions of one topic
// each get every message published after they subscribed, once, and
// none published before: two subscribe, a batch is published, the third
// subscribes, another batch is published. Each has a group of its own.
func testBroadcastEveryMessage(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic := h.topic("bcast")
	n := count(50, 10)
	h.publishN(topic, "before", 5)
	var ins [3]inbox
	subs := make([]*bus.Subscription, 3)
	sub := func(i int) {
		subs[i] = h.subscribe(context.Background(), topic, ins[i].handle(nil),
			bus.WithBroadcast(), bus.WithAckTimeout(s.longLease()))
	}
	sub(0)
	sub(1)
	first := h.publishN(topic, "first", n)
	sub(2)
	second := h.publishN(topic, "second", n)
	both := append(append([]*bus.Message(nil), first...), second...)
	s.eventually(t, func() bool {
		return ins[0].distinct() >= 2*n && ins[1].distinct() >= 2*n && ins[2].distinct() >= n
	}, "every broadcast subscription gets every message published after it subscribed")
	s.never(t, s.quiet(), func() bool {
		return ins[0].len() > 2*n || ins[1].len() > 2*n || ins[2].len() > n
	}, "no redelivery and no message published before a subscription reaches it")
	requireExactlyOnce(t, &ins[0], both, "first broadcast subscription")
	requireExactlyOnce(t, &ins[1], both, "second broadcast subscription")
	requireExactlyOnce(t, &ins[2], second, "broadcast subscription made between the batches")

	groups := map[string]bool{}
	for i, sb := range subs {
		require.True(t, strings.HasPrefix(sb.Group(), "_broadcast."), "a broadcast group is named _broadcast.<id>: %q", sb.Group())
		groups[sb.Group()] = true
		for _, r := range ins[i].all() {
			require.Equal(t, sb.Group(), r.Group, "a delivery names its subscription's group")
		}
	}
	require.Len(t, groups, 3, "each broadcast subscription has a group of its own")
}

// testBroadcastCloseLeavesNoGroup: once a broadcast subscription closed,
// the backend's inspection lists no group of it; an ordinary group of
// the topic stays.
func testBroadcastCloseLeavesNoGroup(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic, group := h.topic("bcastclose"), h.group("bcastclose")
	other := h.subscribe(context.Background(), topic, func(context.Context, *bus.Delivery) error { return nil }, bus.WithGroup(group))
	got := make(chan string, 8)
	sub := h.subscribe(context.Background(), topic, func(_ context.Context, d *bus.Delivery) error {
		trySend(got, d.ID)
		return nil
	}, bus.WithBroadcast(), bus.WithAckTimeout(s.longLease()))
	h.publish(topic, &bus.Message{Payload: []byte("one")})
	recv(t, s, got, "the broadcast subscription gets the message")
	require.Contains(t, h.groupNames(topic), sub.Group(), "the broadcast group is listed while it runs")

	h.closeSub(sub)
	names := h.groupNames(topic)
	require.NotContains(t, names, sub.Group(), "no group is left of a closed broadcast subscription")
	require.Contains(t, names, group, "the topic's ordinary group stays")
	h.closeSub(other)
}

// testBroadcastDeadSubscriberExpires: a broadcast subscription whose
// process dies (every call it makes fails from then on, so it neither
// renews its lease nor deletes its group) is gone from the backend's
// inspection within its expiry plus half the expiry of another broadcast
// subscription of the topic, which deletes it and goes on getting every
// message; the dead one ends with ErrLeaseLost.
func testBroadcastDeadSubscriberExpires(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic := h.topic("bcastdead")
	expiry, sweeper := s.broadcastExpiry(), s.sweeperExpiry()
	var live, dead inbox
	liveSub := h.subscribe(context.Background(), topic, live.handle(nil),
		bus.WithBroadcast(), bus.WithBroadcastExpiry(sweeper), bus.WithAckTimeout(s.longLease()))

	member := crashtest.New(h.be)
	mb := s.memberBus(t, member)
	deadSub, err := mb.Subscribe(context.Background(), topic, dead.handle(nil),
		bus.WithBroadcast(), bus.WithBroadcastExpiry(expiry), bus.WithAckTimeout(s.longLease()))
	require.NoError(t, err, "subscribe the member that dies")

	first := h.publishN(topic, "first", 3)
	s.eventually(t, func() bool { return live.distinct() == 3 && dead.distinct() == 3 }, "both get the messages before the crash")
	require.Contains(t, h.groupNames(topic), deadSub.Group(), "the dying member's group is listed")

	member.Crash()
	took := h.waitGroupGone(topic, deadSub.Group(), "a dead broadcast subscription's group expires")
	assert.LessOrEqual(t, took, expiry+sweeper/2+s.cfg.dur(3*time.Second), "gone within its expiry and half the sweeper's (and the time to delete it)")
	t.Logf("broadcast: expiry %v, sweeper's %v: the dead member's group was gone %v after it died", expiry, sweeper, took.Round(time.Millisecond))

	select {
	case <-deadSub.Done():
	case <-time.After(s.deadline()):
		t.Fatalf("the dead member's broadcast subscription did not end within %v", s.deadline())
	}
	require.ErrorIs(t, deadSub.Err(), bus.ErrLeaseLost, "a subscription that cannot renew its group's lease ends")

	second := h.publishN(topic, "second", 3)
	s.eventually(t, func() bool { return live.distinct() == 6 }, "the live subscription goes on getting every message")
	requireExactlyOnce(t, &live, append(first, second...), "the live broadcast subscription")
	require.True(t, liveSub.Err() == nil, "the live subscription runs: %v", liveSub.Err())
}

// testBroadcastContradictionsRefused: options that contradict a
// broadcast subscription, and a broadcast subscription on a backend
// without Capabilities.Broadcast, are refused before any I/O.
func testBroadcastContradictionsRefused(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic := h.topic("bcastbad")
	nop := func(context.Context, *bus.Delivery) error { return nil }
	tests := []struct {
		name string
		opts []bus.SubscribeOption
		want error
	}{
		{"group", []bus.SubscribeOption{bus.WithBroadcast(), bus.WithGroup("g")}, bus.ErrInvalidOption},
		{"oldest", []bus.SubscribeOption{bus.WithBroadcast(), bus.WithStartFrom(bus.StartOldest)}, bus.ErrInvalidOption},
		{"expiry alone", []bus.SubscribeOption{bus.WithBroadcastExpiry(time.Minute)}, bus.ErrInvalidOption},
		{"expiry too short", []bus.SubscribeOption{bus.WithBroadcast(), bus.WithBroadcastExpiry(time.Millisecond)}, bus.ErrInvalidOption},
		{"reserved group name", []bus.SubscribeOption{bus.WithGroup("_broadcast.mine")}, bus.ErrInvalidOption},
	}
	if !s.caps.Broadcast {
		tests = append(tests, struct {
			name string
			opts []bus.SubscribeOption
			want error
		}{"unsupported", []bus.SubscribeOption{bus.WithBroadcast()}, bus.ErrUnsupported})
	}
	for _, tt := range tests {
		_, err := h.bus.Subscribe(context.Background(), topic, nop, tt.opts...)
		require.Error(t, err, "%s: refused", tt.name)
		require.True(t, errors.Is(err, tt.want), "%s: the error wraps %v: %v", tt.name, tt.want, err)
	}
	require.Zero(t, h.be.subscribes.Load(), "refused before any I/O")
}
