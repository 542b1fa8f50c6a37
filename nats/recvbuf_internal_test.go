package nats

import (
	"context"
	"maps"
	"slices"
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
	// receive receives max messages, in as many Receives as it takes (a
	// loaded machine may split them). It returns a copy of each message
	// as it was received (a later Receive reuses the structs), the
	// messages of the last Receive as returned, and every AckID.
	receive := func(max int) (copies []backend.Message, last []*backend.Message, ids []backend.AckID) {
		require.Eventually(t, func() bool {
			ms, err := s.Receive(ctx, max-len(copies))
			require.NoError(t, err, "receive")
			if len(ms) > 0 {
				last = slices.Clone(ms) // the Receive may reuse its slice too
			}
			for _, m := range ms {
				c := *m
				c.Headers = maps.Clone(m.Headers)
				copies = append(copies, c)
				ids = append(ids, m.AckID)
			}
			return len(copies) == max
		}, 10*time.Second, time.Millisecond, "%d messages", max)
		return copies, last, ids
	}
	first, firstLast, firstIDs := receive(3)
	for i, m := range first {
		assert.Equal(t, "m-"+strconv.Itoa(i), m.ID)
		assert.Equal(t, "x"+strconv.Itoa(i), string(m.Payload))
		assert.Equal(t, map[string]string{"h": strconv.Itoa(i)}, m.Headers)
	}
	_, second, secondIDs := receive(1)
	require.Len(t, second, 1)
	assert.Same(t, firstLast[0], second[0], "the struct is reused")
	assert.Equal(t, "m-3", second[0].ID)
	assert.Equal(t, "x3", string(second[0].Payload))
	assert.Equal(t, map[string]string{"h": "3"}, second[0].Headers)
	for _, m := range firstLast[1:] {
		assert.Equal(t, backend.Message{}, *m, "what the last Receive left beyond this one is dropped")
	}
	assert.NotSame(t, firstIDs[len(firstIDs)-len(firstLast)], secondIDs[0], "AckIDs are not reused")

	require.NoError(t, s.Ack(ctx, append(firstIDs, secondIDs...)), "ack all four")
	require.Eventually(t, func() bool {
		info, err := b.js.Consumer(ctx, s.stream, s.consumer)
		if err != nil {
			return false
		}
		ci, err := info.Info(ctx)
		return err == nil && ci.NumAckPending == 0 && ci.AckFloor.Stream >= 4
	}, 5*time.Second, 5*time.Millisecond, "every delivery settled by its own AckID")
}
