package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/observer"
)

// testGroupsCountLiveMembers: Groups counts a group's live subscriptions
// across processes (buses) as soon as Subscribe returns; a closed one
// stops counting within 2 s (far less than a row's 15 s lifetime: its
// row is deleted, not left to lapse), a lapsed row never counts, a
// closed Backend's members stop counting, and the rows stay out of the
// partitioned groups' members.
func testGroupsCountLiveMembers(t *testing.T, rawURL string) {
	ctx := testCtx(t)
	const topic = "members.count"
	nop := func(context.Context, *bus.Delivery) error { return nil }
	a, b, viewer := openBus(t, rawURL, bus.WithObserver(observer.Nop())), openBus(t, rawURL, bus.WithObserver(observer.Nop())), openBus(t, rawURL)
	consumers := func() map[string]bus.Figure {
		gs, err := viewer.Groups(ctx, topic)
		require.NoError(t, err)
		out := map[string]bus.Figure{}
		for _, g := range gs {
			out[g.Name] = g.Consumers
		}
		return out
	}

	_, err := a.Subscribe(ctx, topic, nop, bus.WithGroup("g"))
	require.NoError(t, err)
	assert.Equal(t, map[string]bus.Figure{"g": 1}, consumers(), "a member counts when Subscribe returns")
	subB, err := b.Subscribe(ctx, topic, nop, bus.WithGroup("g"))
	require.NoError(t, err)
	_, err = a.Subscribe(ctx, topic, nop, bus.WithGroup("h"))
	require.NoError(t, err)
	assert.Equal(t, map[string]bus.Figure{"g": 2, "h": 1}, consumers(), "members of two buses; another group apart")

	require.NoError(t, subB.Close(ctx))
	assert.Eventually(t, func() bool { return consumers()["g"] == 1 }, 2*time.Second, 10*time.Millisecond,
		"a closed subscription stops counting at once: %v", consumers())

	conn, err := pgx.Connect(ctx, rawURL)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, `INSERT INTO bus_members (topic, grp, member, until)
SELECT '#' || id, name, 'lapsed', clock_timestamp() - interval '1 second' FROM bus_groups WHERE topic = $1 AND name = 'g'`, topic)
	require.NoError(t, err)
	assert.Equal(t, map[string]bus.Figure{"g": 1, "h": 1}, consumers(), "a lapsed row does not count")

	be := openBackend(t, ctx, rawURL)
	ms, err := be.Members(ctx, topic, "g")
	require.NoError(t, err)
	assert.Empty(t, ms, "the subscriptions' rows are not members of a partitioned group")

	require.NoError(t, a.Close(ctx))
	assert.Equal(t, map[string]bus.Figure{"g": 0, "h": 0}, consumers(), "a closed bus's members stop counting")
}
