package postgres_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
)

// testAckLeavesPlanCacheMode: an ack makes its own statement use its
// generic plan, within its transaction only: the connection it ran on
// (the pool's only one) goes back to the pool with plan_cache_mode
// unchanged, for the caller's statements on a pool of theirs.
func testAckLeavesPlanCacheMode(t *testing.T, rawURL string) {
	ctx := testCtx(t)
	const topic = "ack.plan"
	be := openBackend(t, ctx, withParam(t, rawURL, "pool_max_conns", "1"))
	s, err := be.Subscribe(ctx, topic, groupG)
	require.NoError(t, err)
	defer s.Close()
	var before string
	require.NoError(t, be.Pool().QueryRow(ctx, `SHOW plan_cache_mode`).Scan(&before))
	require.NoError(t, be.Publish(ctx, topic, []*backend.Message{{ID: "p-1", Payload: []byte("x")}}))
	got := receiveN(t, ctx, s, 1, 5*time.Second)
	require.NoError(t, s.Ack(ctx, []backend.AckID{got[0].AckID}))
	assert.Equal(t, int64(0), pendingOf(t, ctx, be, topic), "the ack settled the message")
	var after string
	require.NoError(t, be.Pool().QueryRow(ctx, `SHOW plan_cache_mode`).Scan(&after))
	assert.Equal(t, before, after, "plan_cache_mode of the connection the ack ran on")
	assert.NotEqual(t, "force_generic_plan", after)
}
