package conformance

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	bus "github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
)

// testSeekGroup: a backend.GroupSeeker moves a group (with its members
// stopped) to the oldest message, to the newest, and to a time; after each
// seek a member gets exactly the messages from that point on, those it had
// acked before included.
func testSeekGroup(t *testing.T, s *suite) {
	h := s.newHarness(t)
	if _, ok := h.be.Backend.(backend.GroupSeeker); !ok {
		t.Skipf("%s does not implement backend.GroupSeeker", s.caps.Name)
	}
	topic, group := h.topic("seek"), h.group("seek")
	ctx, cancel := context.WithTimeout(context.Background(), s.deadline())
	defer cancel()
	opts := []bus.SubscribeOption{bus.WithGroup(group), bus.WithAckTimeout(s.longLease())}
	// consume runs a member until it has handled n messages, then stops it.
	consume := func(n int, what string) *inbox {
		in := &inbox{}
		sub := h.subscribe(context.Background(), topic, in.handle(nil), opts...)
		s.eventually(t, func() bool { return in.distinct() >= n }, "%s: %d messages", what, n)
		h.closeSub(sub)
		return in
	}
	first := numbered("early", 2)
	// A group that never reads keeps every message retained (the in-memory
	// backend drops what every group settled), and the sought group exists
	// before the messages are published.
	h.closeSub(h.subscribe(context.Background(), topic, (&inbox{}).handle(nil), bus.WithGroup(h.group("keeper"))))
	h.closeSub(h.subscribe(context.Background(), topic, (&inbox{}).handle(nil), opts...))
	h.publish(topic, first...)
	// A time strictly after the first messages, in the broker's resolution.
	since := time.Now()
	for time.Now().UnixMilli() <= since.UnixMilli() {
	}
	since = time.Now()
	later := numbered("late", 3)
	h.publish(topic, later...)
	requireExactlyOnce(t, consume(5, "first read"), append(first, later...), "before any seek")

	require.NoError(t, h.bus.SeekGroup(ctx, topic, group, backend.SeekTarget{Oldest: true}), "seek to the oldest")
	requireExactlyOnce(t, consume(5, "after seeking to the oldest"), append(first, later...), "after seeking to the oldest")

	require.NoError(t, h.bus.SeekGroup(ctx, topic, group, backend.SeekTarget{Time: since}), "seek to a time")
	requireExactlyOnce(t, consume(3, "after seeking to a time"), later, "after seeking to a time")

	require.NoError(t, h.bus.SeekGroup(ctx, topic, group, backend.SeekTarget{Newest: true}), "seek to the newest")
	fresh := numbered("fresh", 1)
	in := &inbox{}
	h.subscribe(context.Background(), topic, in.handle(nil), opts...)
	h.publish(topic, fresh...)
	s.eventually(t, func() bool { return in.distinct() >= 1 }, "the message published after seeking to the newest")
	s.never(t, s.quiet(), func() bool { return in.len() > 1 }, "nothing from before the seek")
	assert.Equal(t, fresh[0].ID, in.all()[0].ID, "only the new message")

	err := h.bus.SeekGroup(ctx, topic, h.group("nobody"), backend.SeekTarget{Oldest: true})
	require.ErrorIs(t, err, backend.ErrNotFound, "seeking a group the topic does not have")
}

// SeekGroup forwards the optional GroupSeeker, so the bus's SeekGroup
// reaches the backend's.
func (c *countingBackend) SeekGroup(ctx context.Context, topic, group string, to backend.SeekTarget) error {
	s, ok := c.Backend.(backend.GroupSeeker)
	if !ok {
		return fmt.Errorf("%w: %s cannot seek groups", bus.ErrUnsupported, c.Capabilities().Name)
	}
	return s.SeekGroup(ctx, topic, group, to)
}
