package lifecycle

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/inmemory"
)

func kinds(h History) []Kind {
	var out []Kind
	for _, e := range h.Entries {
		out = append(out, e.Kind)
	}
	return out
}

func TestReadFindsAnIDsEventsAcrossPackedMessagesAndPartitions(t *testing.T) {
	be, err := inmemory.New(nil)
	require.NoError(t, err)
	defer be.Close()
	t0 := time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	noise := func(n int) []Event {
		evs := make([]Event, n)
		for i := range evs {
			evs[i] = Event{Kind: Succeeded, Time: t0, MessageID: "other-" + strconv.Itoa(i), Key: "c-9", Topic: "orders"}
		}
		return evs
	}
	// o-1's steps lie in different messages of different partitions, and
	// among the events of other messages (one with o-1 as a prefix).
	p0 := append(noise(300), Event{Kind: Failed, Time: at(2), MessageID: "o-1", Key: "c-1", Topic: "orders", Attempt: 1, Error: "db down"},
		Event{Kind: Received, Time: at(3), MessageID: "o-10", Key: "c-1", Topic: "orders", Attempt: 1})
	publishEvents(t, be, backend.PartitionTopic("events", 0), MaxPackEvents, p0...)
	publishEvents(t, be, backend.PartitionTopic("events", 2), MaxPackEvents,
		Event{Kind: Received, Time: at(4), MessageID: "o-1", Key: "c-1", Topic: "orders", Attempt: 2},
		Event{Kind: Succeeded, Time: at(5), MessageID: "o-1", Key: "c-1", Topic: "orders", Attempt: 2})
	publishEvents(t, be, "events", MaxPackEvents, Event{Kind: Received, Time: at(1), MessageID: "o-1", Key: "c-1", Topic: "orders", Attempt: 1})
	// A message of the events topic that holds one event and no header.
	old := Event{Kind: RetryScheduled, Time: at(2).Add(time.Millisecond), MessageID: "o-1", Key: "c-1", Topic: "orders", Attempt: 1, Delay: time.Second}
	require.NoError(t, be.Publish(context.Background(), "events", []*backend.Message{{ID: "old", Payload: Append(nil, &old)}}))

	ctx := context.Background()
	h, err := Read(ctx, be, "events", Query{ID: "o-1", DeadLetterTopics: []string{}})
	require.NoError(t, err)
	assert.Equal(t, []Kind{Received, Failed, RetryScheduled, Received, Succeeded}, kinds(h), "o-1's steps, oldest first, from every partition")
	assert.Equal(t, "db down", h.Entries[1].Error)
	assert.Equal(t, 300+2+2+1+1, h.Scanned, "the scan counts events, not messages")
	assert.False(t, h.Truncated)

	byKey, err := Read(ctx, be, "events", Query{Key: "c-1", DeadLetterTopics: []string{}})
	require.NoError(t, err)
	assert.Len(t, byKey.Entries, 6, "every event of key c-1, o-10's included")

	limited, err := Read(ctx, be, "events", Query{ID: "o-1", Limit: 2, DeadLetterTopics: []string{}})
	require.NoError(t, err)
	assert.True(t, limited.Truncated, "the limit stops the scan inside a message")
	assert.Equal(t, 2, limited.Scanned, "at most the limit of events is read")
}
