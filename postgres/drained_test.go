package postgres_test

import (
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/postgres"
)

// testReceiveAfterDrainedFetch: a Receive that follows a fetch which
// took all it found waits for a notification of the topic, but not for
// the block time: a message published without one (on another channel)
// comes in well within the block time, and a notified one too.
func testReceiveAfterDrainedFetch(t *testing.T, rawURL string) {
	ctx := testCtx(t)
	const topic = "drained.fetch"
	sub := openBackend(t, ctx, withParam(t, rawURL, "block", "1s"))
	quiet := openBackend(t, ctx, withParam(t, rawURL, "channel", "drained_elsewhere"))
	s, err := sub.Subscribe(ctx, topic, groupG)
	require.NoError(t, err)
	defer s.Close()

	tests := []struct {
		name string
		pub  *postgres.Backend
	}{
		{"unannounced", quiet},
		{"notified", sub},
	}
	for _, tt := range tests {
		require.NoError(t, tt.pub.Publish(ctx, topic, []*backend.Message{{ID: tt.name + "-1", Payload: []byte("x")}, {ID: tt.name + "-2", Payload: []byte("x")}}))
		// The batch commits at once: one fetch takes both, fewer than 10.
		got, err := s.Receive(ctx, 10)
		require.NoError(t, err)
		require.Len(t, got, 2, "%s: the fetch takes the whole batch", tt.name)
		require.NoError(t, s.Ack(ctx, []backend.AckID{got[0].AckID, got[1].AckID}))

		require.NoError(t, tt.pub.Publish(ctx, topic, []*backend.Message{{ID: tt.name + "-3", Payload: []byte("x")}}))
		start := time.Now()
		got, err = s.Receive(ctx, 10)
		require.NoError(t, err)
		require.Len(t, got, 1, "%s: the message published after the drained fetch", tt.name)
		assert.Equal(t, tt.name+"-3", got[0].ID)
		assert.Less(t, time.Since(start), 500*time.Millisecond, "%s: received well within the block time of 1s", tt.name)
		require.NoError(t, s.Ack(ctx, []backend.AckID{got[0].AckID}))
	}
}

// withParam returns rawURL with the query parameter key set to value.
func withParam(t *testing.T, rawURL, key, value string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	require.NoError(t, err)
	q := u.Query()
	q.Set(key, value)
	u.RawQuery = q.Encode()
	return u.String()
}
