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

func stats(t testing.TB, be *inmemory.Backend, topic string) inmemory.TopicStats {
	t.Helper()
	st, ok := be.Stats(topic)
	require.True(t, ok, "topic %q exists", topic)
	return st
}

func TestSettledEntriesLeaveTheBacklog(t *testing.T) {
	be := newBackend(t, nil)
	a := subscribe(t, be, "free", "a")
	b := subscribe(t, be, "free", "b")
	publish(t, be, "free", "m", 5)
	assert.Equal(t, 5, stats(t, be, "free").Backlog)
	ackAll(t, a, receiveN(t, a, 5, time.Second))
	assert.Equal(t, 5, stats(t, be, "free").Backlog, "group b has not settled them")
	ackAll(t, b, receiveN(t, b, 5, time.Second))
	st := stats(t, be, "free")
	assert.Equal(t, 0, st.Backlog, "every group settled")
	assert.Equal(t, 0, st.Window, "the log is empty")
	assert.Equal(t, uint64(5), st.Published)
}

func TestBacklogErrorPolicyRejectsTheWholeBatch(t *testing.T) {
	be := newBackend(t, &inmemory.Options{MaxBacklog: 10, BacklogPolicy: inmemory.BacklogError})
	s := subscribe(t, be, "full", "g")
	publish(t, be, "full", "a", 8)
	err := be.Publish(context.Background(), "full", msgs("b", 3))
	require.ErrorIs(t, err, inmemory.ErrBacklogFull, "8+3 does not fit in 10")
	assert.Equal(t, 8, stats(t, be, "full").Backlog, "nothing of the failed batch was stored")
	ackAll(t, s, receiveN(t, s, 8, time.Second))
	publish(t, be, "full", "b", 3)
	assert.Equal(t, seq("b", 3), ids(receiveN(t, s, 3, time.Second)), "room again after acks")
}

func TestBatchLargerThanTheBacklogFails(t *testing.T) {
	be := newBackend(t, &inmemory.Options{MaxBacklog: 4})
	subscribe(t, be, "big", "g")
	err := be.Publish(context.Background(), "big", msgs("m", 5))
	require.ErrorIs(t, err, inmemory.ErrBacklogFull, "a batch that can never fit fails even under BacklogWait")
}

func TestBacklogWaitPolicyWaitsForAcks(t *testing.T) {
	be := newBackend(t, &inmemory.Options{MaxBacklog: 5})
	s := subscribe(t, be, "waitroom", "g")
	publish(t, be, "waitroom", "a", 5)

	done := make(chan error, 1)
	go func() { done <- be.Publish(context.Background(), "waitroom", msgs("b", 2)) }()
	select {
	case err := <-done:
		t.Fatalf("Publish returned %v while the backlog was full", err)
	case <-time.After(50 * time.Millisecond):
	}
	got := receiveN(t, s, 5, time.Second)
	ackAll(t, s, got[:2])
	select {
	case err := <-done:
		require.NoError(t, err, "publish completes once there is room")
	case <-time.After(2 * time.Second):
		t.Fatal("Publish still waiting after acks made room")
	}
	assert.Equal(t, 5, stats(t, be, "waitroom").Backlog)
}

func TestBacklogWaitHonoursCtxAndClose(t *testing.T) {
	be := newBackend(t, &inmemory.Options{MaxBacklog: 1})
	subscribe(t, be, "stuck", "g")
	publish(t, be, "stuck", "a", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	err := be.Publish(ctx, "stuck", msgs("b", 1))
	require.ErrorIs(t, err, context.DeadlineExceeded, "waiting publish ends with its ctx")

	done := make(chan error, 1)
	go func() { done <- be.Publish(context.Background(), "stuck", msgs("c", 1)) }()
	require.Eventually(t, func() bool { return len(done) == 0 }, time.Second, time.Millisecond)
	require.NoError(t, be.Close())
	select {
	case err := <-done:
		require.ErrorIs(t, err, backend.ErrClosed, "waiting publish ends with Close")
	case <-time.After(time.Second):
		t.Fatal("Publish still waiting after Close")
	}
}

func TestTopicWithoutGroupKeepsTheNewestEntries(t *testing.T) {
	be := newBackend(t, &inmemory.Options{MaxBacklog: 5})
	publish(t, be, "nogroup", "a", 4)
	publish(t, be, "nogroup", "b", 4)
	st := stats(t, be, "nogroup")
	assert.Equal(t, 5, st.Backlog, "capped at MaxBacklog")
	assert.Equal(t, uint64(3), st.Dropped, "oldest dropped")
	s := subscribe(t, be, "nogroup", "g", oldest)
	want := []string{"a3", "b0", "b1", "b2", "b3"}
	assert.Equal(t, want, ids(receiveN(t, s, 5, time.Second)), "a StartOldest group gets the kept entries")
}

func TestFirstGroupFromNewestDropsKeptEntries(t *testing.T) {
	be := newBackend(t, nil)
	publish(t, be, "drop", "old", 3)
	s := subscribe(t, be, "drop", "g")
	st := stats(t, be, "drop")
	assert.Equal(t, 0, st.Backlog, "nobody owes the old entries")
	late := subscribe(t, be, "drop", "late", oldest)
	publish(t, be, "drop", "new", 1)
	assert.Equal(t, []string{"new0"}, ids(receiveN(t, late, 1, time.Second)), "old entries are gone for later groups too")
	receiveN(t, s, 1, time.Second)
}

func TestStuckEntryDoesNotHoldBackPublishers(t *testing.T) {
	const limit = 10
	be := newBackend(t, &inmemory.Options{MaxBacklog: limit, BacklogPolicy: inmemory.BacklogError})
	s := subscribe(t, be, "stuck", "g")
	publish(t, be, "stuck", "s", 1)
	stuck := receiveN(t, s, 1, time.Second)[0]
	require.NoError(t, s.Nack(context.Background(), stuck.AckID, time.Hour), "held for an hour")
	for i := range 20 {
		publish(t, be, "stuck", fmt.Sprintf("m%d-", i), limit-1)
		ackAll(t, s, receiveN(t, s, limit-1, time.Second))
		st := stats(t, be, "stuck")
		require.Equal(t, 1, st.Backlog, "round %d: only the stuck entry is unsettled", i)
		require.LessOrEqual(t, st.Window, 2*limit+limit, "round %d: the log window stays bounded", i)
	}
	assert.Equal(t, 1, stats(t, be, "stuck").Groups[0].Delayed, "the stuck entry is still scheduled")
}

func TestDeadLetterHonoursTheDeadLetterBacklog(t *testing.T) {
	be := newBackend(t, &inmemory.Options{MaxBacklog: 1, BacklogPolicy: inmemory.BacklogError})
	s := subscribe(t, be, "src", "g", ackTimeout(50*time.Millisecond))
	subscribe(t, be, "src.dlq", "ops")
	publish(t, be, "src.dlq", "x", 1) // fills the dead-letter backlog
	publish(t, be, "src", "m", 1)
	got := receiveN(t, s, 1, time.Second)[0]
	err := s.(backend.DeadLetterer).DeadLetter(context.Background(), got.AckID, "src.dlq", got)
	require.ErrorIs(t, err, inmemory.ErrBacklogFull)
	again := receiveN(t, s, 1, time.Second)[0]
	assert.Equal(t, 2, again.Attempt, "the original stays pending and is redelivered")
}

func TestBacklogBytesLimitCountsPayloads(t *testing.T) {
	be := newBackend(t, &inmemory.Options{MaxBacklogBytes: 4096, BacklogPolicy: inmemory.BacklogError})
	s := subscribe(t, be, "bytes", "g")
	big := func(id string) []*backend.Message {
		return []*backend.Message{{ID: id, Payload: make([]byte, 1500)}}
	}
	require.NoError(t, be.Publish(context.Background(), "bytes", big("a")))
	require.NoError(t, be.Publish(context.Background(), "bytes", big("b")))
	st := stats(t, be, "bytes")
	assert.Greater(t, st.BacklogBytes, int64(3000), "payloads counted")
	err := be.Publish(context.Background(), "bytes", big("c"))
	require.ErrorIs(t, err, inmemory.ErrBacklogFull, "third payload goes over 4096 bytes")
	ackAll(t, s, receiveN(t, s, 2, time.Second))
	assert.Zero(t, stats(t, be, "bytes").BacklogBytes, "settled entries count nothing")
	require.NoError(t, be.Publish(context.Background(), "bytes", big("c")), "room again")

	err = be.Publish(context.Background(), "bytes", []*backend.Message{{ID: "huge", Payload: make([]byte, 5000)}})
	require.ErrorIs(t, err, inmemory.ErrBacklogFull, "a message larger than the byte limit never fits")
}

func TestTopicWithoutGroupKeepsWithinTheByteLimit(t *testing.T) {
	be := newBackend(t, &inmemory.Options{MaxBacklogBytes: 8192})
	for i := range 20 {
		require.NoError(t, be.Publish(context.Background(), "nogroup-bytes", []*backend.Message{{ID: fmt.Sprint(i), Payload: make([]byte, 1000)}}))
	}
	st := stats(t, be, "nogroup-bytes")
	assert.LessOrEqual(t, st.BacklogBytes, int64(8192), "kept within the byte limit")
	assert.Equal(t, uint64(20-st.Backlog), st.Dropped, "the rest was dropped")
}

func TestDeadLetterWaitsForRoomInTheDeadLetterTopic(t *testing.T) {
	be := newBackend(t, &inmemory.Options{MaxBacklog: 1})
	s := subscribe(t, be, "src", "g")
	dlq := subscribe(t, be, "src.dlq", "ops")
	publish(t, be, "src.dlq", "x", 1) // fills the dead-letter backlog
	publish(t, be, "src", "m", 1)
	got := receiveN(t, s, 1, time.Second)[0]
	done := make(chan error, 1)
	go func() { done <- s.(backend.DeadLetterer).DeadLetter(context.Background(), got.AckID, "src.dlq", got) }()
	select {
	case err := <-done:
		t.Fatalf("DeadLetter returned %v while the dead-letter backlog was full", err)
	case <-time.After(50 * time.Millisecond):
	}
	ackAll(t, dlq, receiveN(t, dlq, 1, time.Second))
	select {
	case err := <-done:
		require.NoError(t, err, "dead-letter completes once there is room")
	case <-time.After(2 * time.Second):
		t.Fatal("DeadLetter still waiting after the dead-letter topic made room")
	}
	assert.Equal(t, "m0", receiveN(t, dlq, 1, time.Second)[0].ID, "the copy arrived")
	assert.Zero(t, stats(t, be, "src").Backlog, "the original is settled")
}
