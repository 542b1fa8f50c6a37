package lifecycle

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/observer"
)

// store is a Publish that records what it stores; block, when set, holds
// every publish until it is closed or the publish ctx ends.
type store struct {
	mu      sync.Mutex
	msgs    []backend.Message
	batches int
	block   chan struct{}
	entered chan struct{}
}

func (s *store) publish(ctx context.Context, msgs []*backend.Message) error {
	if s.block != nil {
		select {
		case s.entered <- struct{}{}:
		default:
		}
		select {
		case <-s.block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.batches++
	for _, m := range msgs {
		c := *m
		c.Payload = append([]byte(nil), m.Payload...) // the caller reuses its buffers
		s.msgs = append(s.msgs, c)
	}
	return nil
}

func (s *store) stored() []backend.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]backend.Message(nil), s.msgs...)
}

// events decodes the events of msgs, in order, checking that each
// message says how many it holds and in which format.
func events(t *testing.T, msgs []backend.Message) []Event {
	t.Helper()
	var out []Event
	for _, m := range msgs {
		assert.Equal(t, ContentType, m.Headers[HeaderContentType], "the format is named")
		n := 0
		eachLine(m.Payload, func(line []byte) bool {
			e, err := DecodeIn(line, m.Headers)
			require.NoError(t, err, "each line is an event: %s", line)
			out = append(out, e)
			n++
			return true
		})
		assert.Equal(t, strconv.Itoa(n), m.Headers[HeaderCount], "the count header")
		assert.True(t, bytes.HasSuffix(m.Payload, []byte("\n")), "every line ends in a newline")
	}
	return out
}

func TestEmitterPublishesEveryEventInBatchesAndFlushesOnClose(t *testing.T) {
	st := &store{}
	em := New(Config{Topic: "events", Publish: st.publish, Batch: 8})
	for i := range 100 {
		em.Emit(Event{Kind: Received, Time: time.Now(), MessageID: "m-" + string(rune('a'+i%26)), Topic: "t", Attempt: i + 1})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, em.Close(ctx, ctx), "close flushes")
	msgs := st.stored()
	evs := events(t, msgs)
	require.Len(t, evs, 100, "every event is published")
	last := map[string]int{}
	for _, e := range evs {
		assert.Greater(t, e.Attempt, last[e.MessageID], "the events of a message keep their order")
		last[e.MessageID] = e.Attempt
	}
	ids := map[string]bool{}
	for _, m := range msgs {
		assert.Empty(t, m.Key, "no key: the messages spread over partitions")
		assert.True(t, m.IDGenerated, "the ID is generated, so no backend need remember it")
		ids[m.ID] = true
	}
	assert.Len(t, ids, len(msgs), "every message has an ID of its own")
	assert.GreaterOrEqual(t, len(msgs), 100/8, "batches of at most 8 events, so messages of at most 8")
	assert.Zero(t, em.Dropped(), "nothing dropped")
}

func TestEmitterDropsWhenFullCountsAndReportsOnce(t *testing.T) {
	st := &store{block: make(chan struct{}), entered: make(chan struct{}, 1)}
	var mu sync.Mutex
	var reports []observer.Event
	em := New(Config{Topic: "events", Publish: st.publish, Buffer: 4, Batch: 1, Observe: func(e observer.Event) {
		mu.Lock()
		reports = append(reports, e)
		mu.Unlock()
	}})
	em.Emit(Event{Kind: Received, MessageID: "first", Topic: "t"})
	select {
	case <-st.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the emitter never published")
	}
	// The publish is blocked: 4 more fill the buffer, the rest drop, and
	// Emit never blocks.
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 20 {
			em.Emit(Event{Kind: Received, MessageID: "m", Topic: "t"})
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Emit blocked on a full buffer")
	}
	assert.Equal(t, int64(16), em.Dropped(), "20 emitted, 4 buffered, 16 dropped")
	close(st.block)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, em.Close(ctx, ctx))
	assert.Len(t, events(t, st.stored()), 5, "the first and the 4 buffered are published")
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, reports, 1, "drops are reported once")
	assert.Equal(t, observer.ScopePublish, reports[0].Scope)
	assert.Contains(t, reports[0].Err.Error(), "buffer of 4 was full")
}

func TestEmitterCloseReturnsByItsCtxWhenPublishHangs(t *testing.T) {
	st := &store{block: make(chan struct{}), entered: make(chan struct{}, 1)}
	failed := make(chan struct{}, 1)
	em := New(Config{Topic: "events", Publish: st.publish, Observe: func(e observer.Event) {
		if errors.Is(e.Err, context.Canceled) {
			failed <- struct{}{}
		}
	}})
	em.Emit(Event{Kind: Received, MessageID: "m", Topic: "t"})
	select {
	case <-st.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the emitter never published")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	hard, cancelHard := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelHard()
	start := time.Now()
	err := em.Close(ctx, hard)
	require.Error(t, err, "a close that could not publish says so")
	assert.Less(t, time.Since(start), 5*time.Second, "Close returns soon after its ctx")
	select {
	case <-failed: // the cancelled batch is reported as lost
	case <-time.After(10 * time.Second):
		t.Fatal("the batch Close cancelled was not reported")
	}
	em.Emit(Event{Kind: Received, MessageID: "late", Topic: "t"})
	assert.Equal(t, int64(1), em.Dropped(), "an event after Close is dropped")
}
