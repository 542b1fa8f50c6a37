package lifecycle

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
)

// copies returns the messages as values with their own payloads (the
// packer reuses its buffers).
func copies(msgs []*backend.Message) []backend.Message {
	out := make([]backend.Message, len(msgs))
	for i, m := range msgs {
		out[i] = *m
		out[i].Payload = append([]byte(nil), m.Payload...)
	}
	return out
}

func TestPackPutsManyEventsInAMessageAndSplitsAtTheEventCap(t *testing.T) {
	evs := make([]Event, 600)
	for i := range evs {
		evs[i] = Event{Kind: Succeeded, Time: time.Unix(int64(i), 0), MessageID: "m-" + strconv.Itoa(i), Topic: "orders", Attempt: 1}
	}
	p := packer{maxEvents: MaxPackEvents, maxBytes: MaxPackBytes}
	msgs := copies(p.pack(evs, time.Now()))
	require.Len(t, msgs, 3, "600 events in messages of at most 256")
	for i, want := range []string{"256", "256", "88"} {
		assert.Equal(t, want, msgs[i].Headers[HeaderCount], "message %d", i)
	}
	got := events(t, msgs)
	require.Len(t, got, 600, "every event is packed once")
	for i, e := range got {
		require.Equal(t, "m-"+strconv.Itoa(i), e.MessageID, "events keep their order")
	}
}

func TestPackSplitsAtTheByteCapAndGivesALongEventAMessageOfItsOwn(t *testing.T) {
	small := Event{Kind: Received, Time: time.Unix(1, 0), MessageID: "m", Topic: "t", Attempt: 1}
	long := Event{Kind: Failed, Time: time.Unix(2, 0), MessageID: "m", Topic: "t", Error: strings.Repeat("x", MaxErrorLen)}
	line := len(Append(nil, &small)) + 1
	p := packer{maxEvents: MaxPackEvents, maxBytes: 3 * line}
	evs := []Event{small, small, small, small, long, small}
	msgs := copies(p.pack(evs, time.Now()))
	var counts []string
	for _, m := range msgs {
		counts = append(counts, m.Headers[HeaderCount])
		if m.Headers[HeaderCount] != "1" {
			assert.LessOrEqual(t, len(m.Payload), 3*line, "a message of several events stays within the byte cap")
		}
	}
	assert.Equal(t, []string{"3", "1", "1", "1"}, counts, "three small events fill a message; the long one goes alone")
	assert.Len(t, events(t, msgs), len(evs), "every event is packed once")
}

func TestPackStampsAMonoReadingWithTheWallTime(t *testing.T) {
	now := time.Now()
	mono := int64(now.Sub(Epoch)) - int64(time.Second)
	set := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	p := packer{maxEvents: MaxPackEvents, maxBytes: MaxPackBytes}
	got := events(t, copies(p.pack([]Event{{Kind: Received, Mono: mono, Topic: "t"}, {Kind: Scaled, Time: set, Topic: "t"}}, now)))
	require.Len(t, got, 2)
	assert.WithinDuration(t, now.Add(-time.Second), got[0].Time, time.Millisecond, "a reading a second before now is a second before now")
	assert.True(t, set.Equal(got[1].Time), "a time that is set is kept")
}

func TestEmitterPacksWhatIsBufferedIntoFewMessages(t *testing.T) {
	st := &store{block: make(chan struct{}), entered: make(chan struct{}, 1)}
	em := New(Config{Topic: "events", Publish: st.publish, Buffer: 1000}) // one shard
	em.Emit(Event{Kind: Received, MessageID: "first", Topic: "t"})
	select {
	case <-st.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the emitter never published")
	}
	for i := range 600 { // buffered while the first publish is held
		em.Emit(Event{Kind: Succeeded, MessageID: "m-" + strconv.Itoa(i), Topic: "t"})
	}
	close(st.block)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, em.Close(ctx, ctx))
	msgs := st.stored()
	assert.Equal(t, 4, len(msgs), "the first alone, then 600 in messages of 256, 256 and 88")
	assert.Len(t, events(t, msgs), 601, "every event is published")
	assert.Zero(t, em.Dropped())
}

// BenchmarkSinkEmit is the handler's side of an event: encoding it into
// the buffer (events the emitter cannot keep up with are dropped).
func BenchmarkSinkEmit(b *testing.B) {
	em := New(Config{Topic: "events", Publish: func(context.Context, []*backend.Message) error { return nil }})
	defer func() { _ = em.Close(context.Background(), context.Background()) }()
	sink := em.Sink("orders", "billing", "web-1-4711-9f2c03a1b2c4")
	e := Event{Kind: Succeeded, Mono: 1, MessageID: "019abc12-3456-7def-8123-456789abcdef", Key: "customer-7",
		Group: "billing", Attempt: 1, Duration: 1830 * time.Microsecond}
	b.ReportAllocs()
	for b.Loop() {
		ev := e
		sink.Emit(&ev)
	}
	b.ReportMetric(float64(em.Dropped())/float64(b.N), "dropped/op")
}

// BenchmarkStageEmit is a worker's side of an event: staging it and,
// every stageMax events, handing the stage over to its shard.
func BenchmarkStageEmit(b *testing.B) {
	em := New(Config{Topic: "events", Publish: func(context.Context, []*backend.Message) error { return nil }})
	defer func() { _ = em.Close(context.Background(), context.Background()) }()
	st := em.Sink("orders", "billing", "web-1-4711-9f2c03a1b2c4").Stage()
	e := Event{Kind: Succeeded, MessageID: "019abc12-3456-7def-8123-456789abcdef", Key: "customer-7",
		Group: "billing", Attempt: 1, Duration: 1830 * time.Microsecond}
	b.ReportAllocs()
	for b.Loop() {
		ev := e
		ev.Mono = int64(time.Since(Epoch))
		st.Emit(&ev)
	}
	b.ReportMetric(float64(em.Dropped())/float64(b.N), "dropped/op")
}

func BenchmarkPack(b *testing.B) {
	evs := make([]Event, MaxPackEvents)
	for i := range evs {
		evs[i] = Event{Kind: Succeeded, Mono: int64(i), MessageID: "019abc12-3456-7def-8123-456789abcdef", Key: "customer-7",
			Topic: "orders", Group: "billing", Member: "web-1-4711-9f2c03a1b2c4", Attempt: 1, Duration: 1830 * time.Microsecond}
	}
	p := packer{maxEvents: MaxPackEvents, maxBytes: MaxPackBytes}
	b.ReportAllocs()
	for b.Loop() {
		for i := range evs {
			evs[i].Time = time.Time{}
		}
		p.pack(evs, time.Now())
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(evs)), "ns/event")
}

func TestSinkEmitAllocatesNothing(t *testing.T) {
	em := New(Config{Topic: "events", Publish: func(context.Context, []*backend.Message) error { return nil }, Buffer: 1 << 20})
	defer func() { _ = em.Close(context.Background(), context.Background()) }()
	sink := em.Sink("orders", "billing", "web-1-4711-9f2c03a1b2c4")
	ev := Event{Kind: Succeeded, Mono: 1, MessageID: "019abc12-3456-7def-8123-456789abcdef", Key: "customer-7",
		Group: "billing", Attempt: 1, Duration: 1830 * time.Microsecond}
	sink.Emit(&ev) // the shard's buffer grows once
	allocs := testing.AllocsPerRun(1000, func() {
		e := ev
		sink.Emit(&e)
	})
	assert.Zero(t, allocs, "an event costs its handler no allocation")
}
