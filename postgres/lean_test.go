package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/postgres"
)

// testLeanPublish covers the publishes that neither notify in their own
// transaction nor record the topic (see Backend.Publish).
func testLeanPublish(t *testing.T, rawURL string) {
	t.Run("NotifiesAfterCommit", func(t *testing.T) { testLeanPublishNotifiesAfterCommit(t, rawURL) })
	t.Run("RecordsADeletedTopicAgain", func(t *testing.T) { testLeanPublishRecordsADeletedTopicAgain(t, rawURL) })
}

// testLeanPublishNotifiesAfterCommit: a lean publish to a topic with a
// group asks for a notification after its commit, which a listener
// elsewhere receives, and the group receives the message.
func testLeanPublishNotifiesAfterCommit(t *testing.T, rawURL string) {
	ctx := testCtx(t)
	const topic = "lean.notifies"
	be := openBackend(t, ctx, rawURL)
	sub, err := be.Subscribe(ctx, topic, groupG)
	require.NoError(t, err)
	defer sub.Close()

	conn, err := pgx.Connect(ctx, rawURL)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, "LISTEN bus")
	require.NoError(t, err)

	postgres.ForceClaims(be, -1)
	// The first publish to the topic claims the notification and sends
	// it in its transaction; the second is lean.
	for _, id := range []string{"claimed", "lean"} {
		require.NoError(t, be.Publish(ctx, topic, []*backend.Message{{ID: id, IDGenerated: true, Payload: []byte("x"), PublishedAt: time.Now()}}))
		wait, cancelWait := context.WithTimeout(ctx, 5*time.Second)
		for {
			n, err := conn.WaitForNotification(wait)
			require.NoError(t, err, "a notification of %q after the %s publish", topic, id)
			if n.Payload == topic {
				break
			}
		}
		cancelWait()
		for {
			got, err := sub.Receive(ctx, 10)
			require.NoError(t, err)
			if len(got) > 0 {
				require.Len(t, got, 1)
				assert.Equal(t, id, got[0].ID)
				require.NoError(t, sub.Ack(ctx, []backend.AckID{got[0].AckID}))
				break
			}
		}
	}
}

// testLeanPublishRecordsADeletedTopicAgain: the first publish after this
// Backend deleted a topic records the topic again, however soon it
// follows the last one that did, so that Topics lists it.
func testLeanPublishRecordsADeletedTopicAgain(t *testing.T, rawURL string) {
	ctx := testCtx(t)
	const topic = "lean.deleted"
	be := openBackend(t, ctx, rawURL)
	postgres.ForceClaims(be, -1)
	listed := func() bool {
		topics, err := be.Topics(ctx)
		require.NoError(t, err)
		for _, ti := range topics {
			if ti.Name == topic {
				return true
			}
		}
		return false
	}
	for i := range 3 {
		msgs := []*backend.Message{{ID: "d-1", IDGenerated: true, Payload: []byte("x"), PublishedAt: time.Now()}}
		require.NoError(t, be.Publish(ctx, topic, msgs))
		require.True(t, listed(), "round %d: the topic is listed after a publish", i)
		require.NoError(t, be.DeleteTopic(ctx, topic))
		require.False(t, listed(), "round %d: the topic is gone after DeleteTopic", i)
	}
}
