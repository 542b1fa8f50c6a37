package trimset

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/eventbus-go/bus/backend"
)

func TestAddReportsNewTopicsAndSnapshotClearsPublishedMarks(t *testing.T) {
	var s Set
	assert.True(t, s.Add("b"), "a new topic")
	assert.False(t, s.Add("b"), "a known topic")
	assert.True(t, s.Add("a"))
	s.SetBound("events", backend.RetentionBound{MaxLen: 10, MaxAge: time.Hour})
	got := s.Snapshot()
	assert.Equal(t, []Topic{
		{Name: "a", Published: true},
		{Name: "b", Published: true},
		{Name: "events", Bound: backend.RetentionBound{MaxLen: 10, MaxAge: time.Hour}},
	}, got, "every topic in name order, the bounded one not published to")
	s.Add("a")
	got = s.Snapshot()
	assert.True(t, got[0].Published, "a was published to since the last snapshot")
	assert.False(t, got[1].Published, "b was not")
	b, ok := s.Bound("events")
	assert.True(t, ok)
	assert.Equal(t, int64(10), b.MaxLen)
}

func TestTrimmedDropsATopicIdleLongerThanItsBoundUntilItsNextPublish(t *testing.T) {
	var s Set
	s.Add("idle")
	s.Add("busy")
	s.SetBound("events", backend.RetentionBound{MaxLen: 1})
	s.Snapshot()
	s.Trimmed("idle", 0, time.Hour)
	assert.Len(t, s.Snapshot(), 3, "a topic idle for less than the bound stays")
	s.Trimmed("idle", 0, 0)
	s.Trimmed("busy", 5, 0)
	s.Trimmed("events", 0, 0)
	got := s.Snapshot()
	assert.Equal(t, []Topic{{Name: "busy"}, {Name: "events", Bound: backend.RetentionBound{MaxLen: 1}}}, got,
		"the idle topic left; the one that had something to trim and the bounded one stay")
	assert.True(t, s.Add("idle"), "the next publish adds it again")
}

func TestSetHoldsAtMostMaxTopics(t *testing.T) {
	var s Set
	for i := range Max + 10 {
		s.Add(fmt.Sprint(i))
	}
	assert.Len(t, s.Snapshot(), Max, "topics past Max are not taken")
	s.SetBound("events", backend.RetentionBound{MaxLen: 1})
	assert.Len(t, s.Snapshot(), Max+1, "a bounded topic is taken past Max")
}

func BenchmarkAddKnownTopic(b *testing.B) {
	var s Set
	s.Add("orders")
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			s.Add("orders")
		}
	})
}

func BenchmarkAddKnownTopicOneGoroutine(b *testing.B) {
	var s Set
	s.Add("orders")
	for b.Loop() {
		s.Add("orders")
	}
}
