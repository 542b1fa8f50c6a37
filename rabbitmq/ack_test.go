package rabbitmq_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/testkit/rabbittest"
	"github.com/eventbus-go/bus/observer"
	"github.com/eventbus-go/bus/rabbitmq"
)

// testAckSkipsUnsettledTags: one Ack of several deliveries settles those
// and no other: a delivery between them that is still held, and one
// nacked meanwhile, are not covered by the ack of several tags at once;
// the held one comes back once its member closes, the nacked one at
// once, and nothing acked comes back.
func testAckSkipsUnsettledTags(t *testing.T, node *rabbittest.Node) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	u, err := url.Parse(node.URL())
	require.NoError(t, err)
	b, err := rabbitmq.OpenURL(ctx, u)
	require.NoError(t, err)
	defer b.Close()
	cfg := backend.SubscribeConfig{Group: "g", AckTimeout: time.Minute, MaxInFlight: 8, Observer: observer.Nop()}
	sub, err := b.Subscribe(ctx, "acks", cfg)
	require.NoError(t, err)
	var msgs []*backend.Message
	for i := range 6 {
		msgs = append(msgs, &backend.Message{ID: "a-" + string(rune('0'+i)), Payload: []byte{byte(i)}, PublishedAt: time.Now()})
	}
	require.NoError(t, b.Publish(ctx, "acks", msgs))
	var got []*backend.Message
	for len(got) < 6 {
		ms, err := sub.Receive(ctx, 6)
		require.NoError(t, err)
		got = append(got, ms...)
	}
	for i, m := range got {
		require.Equal(t, msgs[i].ID, m.ID, "delivered in order")
	}
	// Held: 2. Nacked: 4. Acked at once: 0, 1, 3, 5.
	require.NoError(t, sub.Nack(ctx, got[4].AckID, 0))
	require.NoError(t, sub.Ack(ctx, []backend.AckID{got[5].AckID, got[0].AckID, got[3].AckID, got[1].AckID}))

	back := map[string]int{}
	deadline := time.Now().Add(30 * time.Second)
	for back["a-4"] == 0 && time.Now().Before(deadline) {
		ms, err := sub.Receive(ctx, 6)
		require.NoError(t, err)
		for _, m := range ms {
			back[m.ID]++
			require.NoError(t, sub.Ack(ctx, []backend.AckID{m.AckID}))
		}
	}
	assert.Equal(t, map[string]int{"a-4": 1}, back, "only the nacked delivery comes back while the member holds a-2")
	require.NoError(t, sub.Close())

	sub2, err := b.Subscribe(ctx, "acks", cfg)
	require.NoError(t, err)
	defer sub2.Close()
	back = map[string]int{}
	for back["a-2"] == 0 && time.Now().Before(deadline) {
		ms, err := sub2.Receive(ctx, 6)
		require.NoError(t, err)
		for _, m := range ms {
			back[m.ID]++
			require.NoError(t, sub2.Ack(ctx, []backend.AckID{m.AckID}))
		}
	}
	assert.Equal(t, map[string]int{"a-2": 1}, back, "the held delivery comes back once its member closed, and nothing acked does")
	// Nothing more comes: every other message is settled.
	ms, err := sub2.Receive(ctx, 6)
	require.NoError(t, err)
	assert.Empty(t, ms, "no acked message comes back")
}
