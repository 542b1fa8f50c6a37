package nats

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
)

// A Receive reuses the message structs of the last one, as the SPI
// allows, and drops what the last one's messages beyond its own held; the
// AckIDs are never reused: an unsettled one still settles its delivery.
func TestReceiveReusesTheLastReceivesMessages(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, s, topic := newInternalSub(ctx, t, "reuse")
	for i := range 4 {
		require.NoError(t, b.Publish(ctx, topic, []*backend.Message{{ID: "m-" + strconv.Itoa(i), Key: "k", Headers: map[string]string{"h": strconv.Itoa(i)}, Payload: []byte("x" + strconv.Itoa(i))}}), "publish")
	}
	receive := func(max int) []*backend.Message {
		var got []*backend.Message
		require.Eventually(t, func() bool {
			ms, err := s.Receive(ctx, max-len(got))
			require.NoError(t, err, "receive")
			got = append(got, ms...)
			return len(got) == max
		}, 10*time.Second, time.Millisecond, "%d messages", max)
		return got
	}
	first := receive(3)
	firstIDs := make([]backend.AckID, len(first))
	for i, m := range first {
		assert.Equal(t, "m-"+strconv.Itoa(i), m.ID)
		assert.Equal(t, "x"+strconv.Itoa(i), string(m.Payload))
		assert.Equal(t, map[string]string{"h": strconv.Itoa(i)}, m.Headers)
		firstIDs[i] = m.AckID
	}
	second := receive(1)
	assert.Same(t, first[0], second[0], "the struct is reused")
	assert.Equal(t, "m-3", second[0].ID)
	assert.Equal(t, "x3", string(second[0].Payload))
	assert.Equal(t, map[string]string{"h": "3"}, second[0].Headers)
	assert.Equal(t, backend.Message{}, *first[1], "what the last Receive left beyond this one is dropped")
	assert.Equal(t, backend.Message{}, *first[2])
	assert.NotSame(t, firstIDs[0], second[0].AckID, "AckIDs are not reused")

	require.NoError(t, s.Ack(ctx, append(firstIDs, second[0].AckID)), "ack all four")
	require.Eventually(t, func() bool {
		info, err := b.js.Consumer(ctx, s.stream, s.consumer)
		if err != nil {
			return false
		}
		ci, err := info.Info(ctx)
		return err == nil && ci.NumAckPending == 0 && ci.AckFloor.Stream >= 4
	}, 5*time.Second, 5*time.Millisecond, "every delivery settled by its own AckID")
}
