package redisstream_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/redistest"
	"github.com/eventbus-go/bus/redisstream"
)

// A batch larger than one script call is published in several, each
// message once, and published again it stores nothing; with the window
// off the same IDs are stored again; a message due later waits in the
// schedule and counts there.
func TestLargeBatchesAreDeduplicatedAcrossScriptCalls(t *testing.T) {
	url := redistest.URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, _, client := openBus(t, url, nil)
	topic := uniqueTopic(t)
	batch := make([]*bus.Message, 1000)
	for i := range batch {
		batch[i] = &bus.Message{ID: fmt.Sprintf("m-%d", i), Payload: []byte("x")}
	}
	batch[999].DeliverAt = time.Now().Add(time.Hour)
	require.NoError(t, b.Publish(ctx, topic, batch...))
	require.NoError(t, b.Publish(ctx, topic, batch...), "the second publish of the same IDs succeeds")
	ts, err := b.Topics(ctx)
	require.NoError(t, err)
	var found bool
	for _, ti := range ts {
		if ti.Name == topic {
			found = true
			assert.EqualValues(t, 999, ti.Messages, "each message stored once")
			assert.EqualValues(t, 1, ti.Scheduled, "the delayed one waits in the schedule")
		}
	}
	require.True(t, found, "the topic is listed")

	off, _, _ := openBus(t, url, &redisstream.Options{DedupWindow: -1})
	require.NoError(t, off.Publish(ctx, topic, batch[:10]...))
	n, err := client.XLen(ctx, "bus:{"+topic+"}").Result()
	require.NoError(t, err)
	assert.EqualValues(t, 1009, n, "without a window the IDs are stored again")
}
