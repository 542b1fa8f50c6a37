package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
)

// testNackNotifiesOtherProcesses: a Nack with no delay, after its commit,
// notifies the topic on the channel, which wakes the members of other
// processes (a member elsewhere would otherwise see it at its next poll);
// such a member, on another Backend, then receives the message as its
// second attempt.
func testNackNotifiesOtherProcesses(t *testing.T, rawURL string) {
	ctx := testCtx(t)
	const topic = "notify.nack"
	a, b := openBackend(t, ctx, rawURL), openBackend(t, ctx, rawURL)
	cfg := groupG
	subA, err := a.Subscribe(ctx, topic, cfg)
	require.NoError(t, err)
	defer subA.Close()
	require.NoError(t, a.Publish(ctx, topic, []*backend.Message{{ID: "n-1", Payload: []byte("x")}}))
	got, err := subA.Receive(ctx, 1)
	require.NoError(t, err)
	require.Len(t, got, 1)

	conn, err := pgx.Connect(ctx, rawURL)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, "LISTEN bus")
	require.NoError(t, err)

	require.NoError(t, subA.Nack(ctx, got[0].AckID, 0))
	wait, cancelWait := context.WithTimeout(ctx, 5*time.Second)
	defer cancelWait()
	for {
		n, err := conn.WaitForNotification(wait)
		require.NoError(t, err, "a notification of %q after the nack", topic)
		if n.Payload == topic {
			break
		}
	}

	subB, err := b.Subscribe(ctx, topic, cfg)
	require.NoError(t, err)
	defer subB.Close()
	for {
		again, err := subB.Receive(ctx, 1)
		require.NoError(t, err)
		if len(again) == 1 {
			assert.Equal(t, "n-1", again[0].ID)
			assert.Equal(t, 2, again[0].Attempt, "the nacked delivery comes back counted")
			break
		}
	}
}
