package lifecycle

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
)

func closeEmitter(t *testing.T, em *Emitter) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, em.Close(ctx, ctx))
}

func TestSinkPacksItsEventsWithTheSharedFieldsInHeaders(t *testing.T) {
	st := &store{}
	em := New(Config{Topic: "events", Publish: st.publish})
	sink := em.Sink("orders", "billing", "web-1")
	for i := range 10 {
		sink.Emit(&Event{Kind: Received, Mono: int64(i + 1), MessageID: "m-" + strconv.Itoa(i), Group: "billing", Attempt: 1})
	}
	em.Emit(Event{Kind: Replayed, Time: time.Now(), MessageID: "dl", Topic: "orders", Group: "billing", DeadLetter: "orders.dlq"})
	closeEmitter(t, em)

	msgs := st.stored()
	var fromSink, fromEmitter int
	for _, m := range msgs {
		if m.Headers[HeaderTopic] == "" {
			fromEmitter++
			assert.Contains(t, string(m.Payload), `"topic":"orders"`, "an event of no sink names its topic on its line")
			continue
		}
		fromSink++
		assert.Equal(t, "orders", m.Headers[HeaderTopic])
		assert.Equal(t, "billing", m.Headers[HeaderGroup])
		assert.Equal(t, "web-1", m.Headers[HeaderMember])
		for _, field := range []string{`"topic"`, `"group"`, `"member"`} {
			assert.NotContains(t, string(m.Payload), field, "a sink's lines leave out what the headers give")
		}
	}
	assert.Positive(t, fromSink)
	assert.Equal(t, 1, fromEmitter, "the sink's events and the emitter's are packed apart")
	evs := events(t, msgs)
	require.Len(t, evs, 11)
	seen := map[string]Event{}
	for _, e := range evs {
		seen[e.MessageID] = e
	}
	for i := range 10 {
		e := seen["m-"+strconv.Itoa(i)]
		assert.Equal(t, Event{Kind: Received, Time: e.Time, MessageID: "m-" + strconv.Itoa(i), Topic: "orders", Group: "billing", Member: "web-1", Attempt: 1}, e,
			"the reader gets back every field")
	}
	assert.Equal(t, "orders.dlq", seen["dl"].DeadLetter)
}

func TestDecodeInPrefersTheLineAndNeedsATopic(t *testing.T) {
	hdr := map[string]string{HeaderTopic: "orders", HeaderGroup: "billing", HeaderMember: "web-1"}
	e, err := DecodeIn([]byte(`{"kind":"received","time":"2026-11-25T09:00:00Z","id":"1","group":"audit"}`), hdr)
	require.NoError(t, err)
	assert.Equal(t, "orders", e.Topic)
	assert.Equal(t, "audit", e.Group, "a field on the line wins over the header")
	assert.Equal(t, "web-1", e.Member)
	_, err = DecodeIn([]byte(`{"kind":"received","time":"2026-11-25T09:00:00Z","id":"1"}`), nil)
	assert.ErrorContains(t, err, "no topic", "a line without a topic, in a message without the header, is refused")
}

func TestStageHandsOverInGroupsAndKeepsEveryEvent(t *testing.T) {
	st := &store{}
	em := New(Config{Topic: "events", Publish: st.publish})
	stage := em.Sink("orders", "billing", "web-1").Stage()
	for i := range stageMax - 1 {
		stage.Emit(&Event{Kind: Succeeded, Mono: int64(i + 1), MessageID: "m-" + strconv.Itoa(i)})
	}
	assert.True(t, stage.Pending(), "below the group size the stage holds its events")
	stage.Emit(&Event{Kind: Succeeded, Mono: stageMax, MessageID: "full"})
	assert.False(t, stage.Pending(), "a full stage is handed over")

	stage.Emit(&Event{Kind: Received, Mono: 1000, MessageID: "old"})
	assert.True(t, stage.Pending())
	stage.Emit(&Event{Kind: Succeeded, Mono: 1000 + stageAge, MessageID: "late"})
	assert.False(t, stage.Pending(), "a stage whose oldest event is stageAge old is handed over")

	stage.Emit(&Event{Kind: Received, Mono: 5000, MessageID: "last"})
	stage.Flush()
	assert.False(t, stage.Pending())
	closeEmitter(t, em)
	assert.Len(t, events(t, st.stored()), stageMax+3, "every staged event is published")
	assert.Zero(t, em.Dropped())
}

func TestEventsAfterReleaseStillGoOut(t *testing.T) {
	st := &store{}
	em := New(Config{Topic: "events", Publish: st.publish})
	sink := em.Sink("orders", "billing", "web-1")
	stage := sink.Stage()
	stage.Emit(&Event{Kind: Received, Mono: 1, MessageID: "staged"})
	sink.Emit(&Event{Kind: Received, Mono: 1, MessageID: "before"})
	sink.Release()
	sink.Emit(&Event{Kind: Succeeded, Mono: 2, MessageID: "after"})
	stage.Flush() // a worker abandoned by a hard close comes back late
	stage.Release()
	stage.Emit(&Event{Kind: Succeeded, Mono: 3, MessageID: "released"})
	assert.False(t, stage.Pending(), "a released stage hands an event over at once")
	closeEmitter(t, em)
	got := map[string]Event{}
	for _, e := range events(t, st.stored()) {
		got[e.MessageID] = e
	}
	require.Len(t, got, 4, "the events before and after the release are all published")
	for id, e := range got {
		assert.Equal(t, "orders", e.Topic, id)
		assert.Equal(t, "web-1", e.Member, id)
	}
	staged := got["staged"]
	assert.Equal(t, "billing", staged.Group, "a line staged before the release gets back the fields its sink's headers gave")
	assert.Equal(t, Received, staged.Kind)
	assert.WithinDuration(t, Epoch.Add(1), staged.Time, time.Millisecond, "stamped by its clock reading")
}

// TestStageSendsAnEventOfAnotherGroupWhole stages an event of the
// subscription's group and one of another: each reads back with its own
// group, the second as it came.
func TestStageSendsAnEventOfAnotherGroupWhole(t *testing.T) {
	st := &store{}
	em := New(Config{Topic: "events", Publish: st.publish})
	stage := em.Sink("orders", "billing", "web-1").Stage()
	stage.Emit(&Event{Kind: Received, Mono: 1, MessageID: "own", Group: "billing"})
	stage.Emit(&Event{Kind: Received, Mono: 2, MessageID: "other", Group: "audit"})
	closeEmitter(t, em)
	got := map[string]string{}
	for _, e := range events(t, st.stored()) {
		got[e.MessageID] = e.Group
	}
	assert.Equal(t, map[string]string{"own": "billing", "other": "audit"}, got)
}

func TestStageDropsWhatTheRoomCannotTake(t *testing.T) {
	st := &store{block: make(chan struct{}), entered: make(chan struct{}, 1)}
	em := New(Config{Topic: "events", Publish: st.publish, Buffer: 4, Batch: 1})
	em.Emit(Event{Kind: Received, MessageID: "first", Topic: "t"})
	select {
	case <-st.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the emitter never published")
	}
	stage := em.Sink("orders", "", "web-1").Stage()
	for i := range 10 {
		stage.Emit(&Event{Kind: Received, Mono: int64(i + 1), MessageID: "m"})
	}
	stage.Flush()
	assert.Equal(t, int64(6), em.Dropped(), "10 staged, room for 4")
	close(st.block)
	closeEmitter(t, em)
	assert.Len(t, events(t, st.stored()), 5, "the first and the 4 that fit")
}

func TestStageEmitAllocatesNothing(t *testing.T) {
	em := New(Config{Topic: "events", Publish: func(context.Context, []*backend.Message) error { return nil }, Buffer: 1 << 20})
	defer func() { _ = em.Close(context.Background(), context.Background()) }()
	stage := em.Sink("orders", "billing", "web-1-4711-9f2c03a1b2c4").Stage()
	ev := Event{Kind: Succeeded, Mono: 1, MessageID: "019abc12-3456-7def-8123-456789abcdef", Key: "customer-7",
		Group: "billing", Attempt: 1, Duration: 1830 * time.Microsecond}
	for range 2 * stageMax { // the stage's and the shard's buffers grow once
		e := ev
		stage.Emit(&e)
	}
	allocs := testing.AllocsPerRun(1000, func() {
		e := ev
		stage.Emit(&e)
	})
	assert.Zero(t, allocs, "an event costs its handler no allocation")
}

func TestCloseHandsOverWhatTheStagesHold(t *testing.T) {
	st := &store{}
	em := New(Config{Topic: "events", Publish: st.publish})
	stage := em.Sink("orders", "billing", "web-1").Stage()
	stage.Emit(&Event{Kind: Received, Mono: 1, MessageID: "staged"})
	require.True(t, stage.Pending())
	closeEmitter(t, em)
	evs := events(t, st.stored())
	require.Len(t, evs, 1, "an event still staged when the emitter closes is published")
	assert.Equal(t, "staged", evs[0].MessageID)
	assert.Zero(t, em.Dropped())
}

func TestTheEmitterVisitsOnlyTheStagesThatGotAnEvent(t *testing.T) {
	em := New(Config{Topic: "events", Publish: func(context.Context, []*backend.Message) error { return nil }})
	defer closeEmitter(t, em)
	sink := em.Sink("orders", "billing", "web-1")
	busy := sink.Stage()
	sink.Stage() // idle: never listed
	pending := func() int {
		sink.pendMu.Lock()
		defer sink.pendMu.Unlock()
		return len(sink.pending)
	}
	em.regMu.Lock() // holds the emitter's visits off
	for i := range 3 {
		busy.Emit(&Event{Kind: Received, Mono: int64(i + 1), MessageID: "m"})
	}
	assert.Equal(t, 1, pending(), "a stage is listed once, at its first event, and an idle one never")
	sink.flushStages()
	assert.Zero(t, pending(), "a visit empties the list")
	assert.False(t, busy.Pending(), "and hands the stage over")
	busy.Emit(&Event{Kind: Succeeded, Mono: 10, MessageID: "m"})
	assert.Equal(t, 1, pending(), "the next event lists the stage again")
	em.regMu.Unlock()
}

// TestAnEventEmittedAgainGetsItsNewTime emits one event twice, as the
// bus makes a received event into its succeeded one, through a stage
// and through the sink: the second is stamped by its own clock reading.
func TestAnEventEmittedAgainGetsItsNewTime(t *testing.T) {
	st := &store{}
	em := New(Config{Topic: "events", Publish: st.publish})
	sink := em.Sink("orders", "billing", "web-1")
	stage := sink.Stage()
	ms := int64(time.Millisecond)
	for _, c := range []struct {
		id   string
		emit func(*Event)
	}{{"staged", stage.Emit}, {"direct", sink.Emit}} {
		ev := Event{Kind: Received, Mono: ms, MessageID: c.id}
		c.emit(&ev)
		assert.True(t, ev.Time.IsZero(), "%s: the caller's event keeps its Time", c.id)
		ev.Kind, ev.Mono = Succeeded, 6*ms
		c.emit(&ev)
	}
	closeEmitter(t, em)
	times := map[string]map[Kind]time.Time{"staged": {}, "direct": {}}
	for _, e := range events(t, st.stored()) {
		times[e.MessageID][e.Kind] = e.Time
	}
	for id, byKind := range times {
		require.Len(t, byKind, 2, id)
		assert.WithinDuration(t, byKind[Received].Add(5*time.Millisecond), byKind[Succeeded], time.Millisecond,
			"%s: each emit is stamped by its own reading", id)
	}
}
