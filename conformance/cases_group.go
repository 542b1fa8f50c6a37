package conformance

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	bus "github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
)

// testCreateGroupKeepsWhatComesBeforeItsFirstMember: a group created
// ahead with Bus.CreateGroup keeps what is published before its first
// member subscribes (with the default StartNewest), and creating it again
// leaves it where it stands: a member then gets exactly what it had not
// handled. Bad names are refused before any I/O.
func testCreateGroupKeepsWhatComesBeforeItsFirstMember(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic, group := h.topic("create"), h.group("create")
	ctx, cancel := context.WithTimeout(context.Background(), s.deadline())
	defer cancel()
	require.NoError(t, h.bus.CreateGroup(ctx, topic, group), "create the group")
	require.NoError(t, h.bus.CreateGroup(ctx, topic, group), "create the group again")

	consume := func(want []*bus.Message, what string) {
		in := &inbox{}
		sub := h.subscribe(context.Background(), topic, in.handle(nil), bus.WithGroup(group), bus.WithAckTimeout(s.longLease()))
		s.eventually(t, func() bool { return in.distinct() >= len(want) }, "%s: %d messages", what, len(want))
		s.never(t, s.quiet(), func() bool { return in.distinct() > len(want) }, "%s: nothing else", what)
		h.closeSub(sub)
		requireExactlyOnce(t, in, want, what)
	}
	ahead := numbered("ahead", 3)
	h.publish(topic, ahead...)
	consume(ahead, "the first member")

	between := numbered("between", 2)
	h.publish(topic, between...)
	require.NoError(t, h.bus.CreateGroup(ctx, topic, group), "create the existing group")
	consume(between, "a member after the group was created again")

	require.ErrorIs(t, h.bus.CreateGroup(ctx, "", group), bus.ErrInvalidTopic, "an empty topic")
	require.ErrorIs(t, h.bus.CreateGroup(ctx, topic, "no spaces"), bus.ErrInvalidOption, "a group name against the topic rules")
}

// CreateGroup forwards the optional GroupCreator, so the bus's
// CreateGroup reaches the backend's; without one it reports
// ErrUnsupported and the bus creates the group through Subscribe.
func (c *countingBackend) CreateGroup(ctx context.Context, topic, group string) error {
	gc, ok := c.Backend.(backend.GroupCreator)
	if !ok {
		return fmt.Errorf("%w: %s has no GroupCreator", bus.ErrUnsupported, c.Capabilities().Name)
	}
	return gc.CreateGroup(ctx, topic, group)
}
