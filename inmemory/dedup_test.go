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
	"github.com/eventbus-go/bus/internal/msgid"
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

// generatedIDs returns n IDs of the bus's generator, which the topic
// remembers apart from other IDs.
func generatedIDs(n int) []string {
	all := msgid.Batch(n)
	ids := make([]string, n)
	for i := range ids {
		ids[i] = all[36*i : 36*i+36]
	}
	return ids
}

func publishIDs(t *testing.T, be *inmemory.Backend, topic string, ids ...string) {
	t.Helper()
	msgs := make([]*backend.Message, len(ids))
	for i, id := range ids {
		msgs[i] = &backend.Message{ID: id, Payload: []byte(id)}
	}
	require.NoError(t, be.Publish(context.Background(), topic, msgs))
}

// The IDs the bus generates are deduplicated like any other: within a
// batch, across batches, until the window ends.
func TestDedupOfGeneratedIDs(t *testing.T) {
	be := newBackend(t, &inmemory.Options{DedupWindow: 100 * time.Millisecond})
	s := subscribe(t, be, "gen", "g")
	ids := generatedIDs(70) // more than one block of values
	publishIDs(t, be, "gen", ids[:40]...)
	publishIDs(t, be, "gen", append(ids[30:], ids[69], "other")...)
	assert.Equal(t, 71, stats(t, be, "gen").Backlog, "each ID stored once: within the batch, and across batches")
	got := receiveN(t, s, 71, time.Second)
	seen := map[string]int{}
	for _, m := range got {
		seen[m.ID]++
		assert.Equal(t, m.ID, string(m.Payload), "the first copy is the one stored")
	}
	assert.Len(t, seen, 71, "no ID twice")
	ackAll(t, s, got)
	require.Eventually(t, func() bool {
		publishIDs(t, be, "gen", ids[5])
		return stats(t, be, "gen").Backlog == 1
	}, 5*time.Second, 10*time.Millisecond, "stored again once the window ended")
	assert.Equal(t, ids[5], receiveN(t, s, 1, time.Second)[0].ID)
}

// MaxBacklog bounds the IDs of both kinds together, the oldest forgotten
// first; generated IDs are forgotten by blocks.
func TestDedupBoundCountsGeneratedIDs(t *testing.T) {
	be := newBackend(t, &inmemory.Options{MaxBacklog: 10})
	s := subscribe(t, be, "mixed", "g")
	gens := generatedIDs(5)
	publishIDs(t, be, "mixed", gens...)
	ackAll(t, s, receiveN(t, s, 5, time.Second))
	for i := range 5 {
		publishID(t, be, "mixed", fmt.Sprintf("m%d", i), nil)
	}
	ackAll(t, s, receiveN(t, s, 5, time.Second))
	publishIDs(t, be, "mixed", gens[0], "m0")
	assert.Equal(t, 0, stats(t, be, "mixed").Backlog, "ten IDs are all remembered")

	publishID(t, be, "mixed", "m5", nil) // the eleventh: the oldest go
	ackAll(t, s, receiveN(t, s, 1, time.Second))
	publishIDs(t, be, "mixed", "m0", "m4")
	assert.Equal(t, 0, stats(t, be, "mixed").Backlog, "the newer IDs are still remembered")
	publishIDs(t, be, "mixed", gens[4])
	got := receiveN(t, s, 1, time.Second)
	assert.Equal(t, gens[4], got[0].ID, "the generated IDs, older, were forgotten")
}

// Generated IDs above every one the topic has seen skip the lookups; one
// that comes later than a higher one (two publishers interleaving), or
// again after its batch was refused, is still looked up and stored once.
func TestDedupOfGeneratedIDsOutOfOrderAndAfterARefusedBatch(t *testing.T) {
	// The bytes bound refuses the batch: a bound on entries would also
	// bound the IDs remembered (see TestDedupBoundCountsGeneratedIDs).
	be := newBackend(t, &inmemory.Options{MaxBacklogBytes: 1200, BacklogPolicy: inmemory.BacklogError})
	s := subscribe(t, be, "gen", "g")
	gen := generatedIDs(6) // each entry counts 256 + 36 + 36 bytes
	publishIDs(t, be, "gen", gen[3], gen[1])
	publishIDs(t, be, "gen", gen[0], gen[1], gen[3])
	assert.Equal(t, 3, stats(t, be, "gen").Backlog, "a lower ID after a higher one is new; repeats of both are dropped")
	err := be.Publish(context.Background(), "gen", []*backend.Message{{ID: gen[4], Payload: []byte(gen[4])}, {ID: gen[5], Payload: []byte(gen[5])}})
	require.ErrorIs(t, err, inmemory.ErrBacklogFull, "five entries do not fit in 1200 bytes")
	got := receiveN(t, s, 3, time.Second)
	assert.Equal(t, []string{gen[3], gen[1], gen[0]}, ids(got))
	ackAll(t, s, got)
	publishIDs(t, be, "gen", gen[5], gen[4])
	got = receiveN(t, s, 2, time.Second)
	assert.Equal(t, []string{gen[5], gen[4]}, ids(got), "the refused batch's IDs were not remembered")
	publishIDs(t, be, "gen", gen[4])
	assert.Equal(t, 2, stats(t, be, "gen").Backlog, "but they are once stored")
}
