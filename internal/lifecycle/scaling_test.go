package lifecycle

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/inmemory"
)

// publishEvents stores evs on topic as an emitter would, packed by
// pack events a message.
func publishEvents(t *testing.T, be backend.Backend, topic string, pack int, evs ...Event) {
	t.Helper()
	p := packer{maxEvents: pack, maxBytes: MaxPackBytes}
	require.NoError(t, be.Publish(context.Background(), topic, p.pack(evs, time.Now())), "publish events")
}

func TestScalingKeepsEachMembersLatestDecisionAndReadsOnIncrementally(t *testing.T) {
	be, err := inmemory.New(nil)
	require.NoError(t, err)
	defer be.Close()
	t0 := time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)
	scaled := func(member string, bound int, reason string, at time.Duration) Event {
		return Event{Kind: Scaled, Time: t0.Add(at), Topic: "orders", Group: "billing", Member: member, Bound: bound, Reason: reason}
	}
	var other []Event
	for i := range 600 { // more than a page of other events, one a message
		other = append(other, Event{Kind: Received, Time: t0, MessageID: "m" + string(rune('a'+i%26)), Topic: "orders", Group: "billing", Attempt: 1})
	}
	publishEvents(t, be, "events", 1, other...)
	evs := []Event{scaled("m1", 2, "backlog", 1*time.Second), scaled("m1", 4, "backlog", 2*time.Second), scaled("m2", 8, "backlog", 3*time.Second),
		{Kind: Scaled, Time: t0, Topic: "orders", Group: "shipping", Member: "m9", Bound: 3, Reason: "drained"}}
	publishEvents(t, be, "events", MaxPackEvents, evs...)

	sc := NewScaling("events")
	truncated, err := sc.Update(context.Background(), be, 10_000)
	require.NoError(t, err)
	require.False(t, truncated, "everything was read")
	bs := sc.Of("orders", "billing")
	require.Len(t, bs, 2, "one bound per member")
	require.Equal(t, Bound{Topic: "orders", Group: "billing", Member: "m1", Bound: 4, Reason: "backlog", Time: t0.Add(2 * time.Second)}, bs[0], "m1's latest")
	require.Equal(t, 8, bs[1].Bound, "m2's latest")

	publishEvents(t, be, "events", MaxPackEvents, scaled("m1", 1, "drained", 10*time.Second))
	_, err = sc.Update(context.Background(), be, 1)
	require.NoError(t, err, "a second update reads only what is new, within a limit of one")
	bs = sc.Of("orders", "billing")
	require.Equal(t, 1, bs[0].Bound, "m1 scaled down since")
	require.Equal(t, "drained", bs[0].Reason)
	require.Len(t, sc.Of("orders", "shipping"), 1, "other groups are kept apart")
}

func TestScalingStopsAtItsLimit(t *testing.T) {
	be, err := inmemory.New(nil)
	require.NoError(t, err)
	defer be.Close()
	evs := make([]Event, 10)
	for i := range evs {
		evs[i] = Event{Kind: Scaled, Time: time.Unix(int64(i), 0), Topic: "t", Group: "g", Member: "m", Bound: i + 1, Reason: "backlog"}
	}
	publishEvents(t, be, "events", 2, evs...) // five messages of two events
	sc := NewScaling("events")
	truncated, err := sc.Update(context.Background(), be, 4)
	require.NoError(t, err)
	require.True(t, truncated, "stopped at the limit")
	require.Equal(t, 4, sc.Of("t", "g")[0].Bound, "the fourth event, the end of the second message, was the last read")
	truncated, err = sc.Update(context.Background(), be, 3)
	require.NoError(t, err)
	require.True(t, truncated, "stopped past the limit, at the end of a message")
	require.Equal(t, 8, sc.Of("t", "g")[0].Bound, "whole messages are read: two more")
	truncated, err = sc.Update(context.Background(), be, 100)
	require.NoError(t, err)
	require.False(t, truncated)
	require.Equal(t, 10, sc.Of("t", "g")[0].Bound, "the next update read on from there")
}
