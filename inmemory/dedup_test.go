package inmemory_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/inmemory"
)

func publishID(t *testing.T, be *inmemory.Backend, topic, id string, headers map[string]string) {
	t.Helper()
	require.NoError(t, be.Publish(context.Background(), topic, []*backend.Message{{ID: id, Headers: headers, Payload: []byte(id)}}))
}

// A topic forgets an ID when its window ends: the same ID is stored again.
func TestDedupWindowEnds(t *testing.T) {
	be := newBackend(t, &inmemory.Options{DedupWindow: 50 * time.Millisecond})
	s := subscribe(t, be, "ends", "g")
	publishID(t, be, "ends", "a", nil)
	publishID(t, be, "ends", "a", nil)
	assert.Equal(t, 1, stats(t, be, "ends").Backlog, "a duplicate within the window is not stored")
	require.Eventually(t, func() bool {
		publishID(t, be, "ends", "a", nil)
		return stats(t, be, "ends").Backlog == 2
	}, 5*time.Second, 10*time.Millisecond, "stored again once the window ended")
	receiveN(t, s, 2, time.Second)
}

// A topic remembers at most MaxBacklog IDs, the newest; a replayed copy
// (backend.HeaderReplayed) is not a duplicate of its original; a negative
// window turns deduplication off.
func TestDedupIsBoundedAndKnowsReplays(t *testing.T) {
	be := newBackend(t, &inmemory.Options{MaxBacklog: 10})
	s := subscribe(t, be, "bounded", "g")
	for i := range 11 {
		publishID(t, be, "bounded", fmt.Sprintf("m%d", i), nil)
		ackAll(t, s, receiveN(t, s, 1, time.Second))
	}
	publishID(t, be, "bounded", "m10", nil)
	publishID(t, be, "bounded", "m0", nil)
	got := receiveN(t, s, 1, time.Second)
	assert.Equal(t, "m0", got[0].ID, "the oldest ID was forgotten, the newest kept")
	ackAll(t, s, got)
	publishID(t, be, "bounded", "m10", map[string]string{backend.HeaderReplayed: "1"})
	assert.Equal(t, "m10", receiveN(t, s, 1, time.Second)[0].ID, "a replay is stored")

	off := newBackend(t, &inmemory.Options{DedupWindow: -1})
	subscribe(t, off, "off", "g")
	publishID(t, off, "off", "a", nil)
	publishID(t, off, "off", "a", nil)
	assert.Equal(t, 2, stats(t, off, "off").Backlog, "no window, no deduplication")
}
