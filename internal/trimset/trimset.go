// Package trimset holds the topics a backend trims on its own, with no
// subscriber running: those its Backend published to, and the retention
// bounds set on them (backend.RetentionBounder). The Redis and
// PostgreSQL backends trim each topic of their set every trim interval.
package trimset

import (
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eventbus-go/bus/backend"
)

// Max is how many topics a Set holds: a process that publishes to
// topics without end has the others trimmed by their subscribers only.
const Max = 4096

// Set is a set of topics, each with an optional retention bound and a
// mark of a publish since its last pass. It is safe for concurrent use;
// Add, on the publish path, costs one map lookup for a known topic.
type Set struct {
	topics sync.Map // string -> *entry
	n      atomic.Int64
	mu     sync.Mutex
	bounds map[string]backend.RetentionBound
}

type entry struct {
	published atomic.Bool
	// active is when the topic was last published to (as a Snapshot
	// saw it) or trimmed, in Unix nanoseconds.
	active atomic.Int64
}

// Topic is one topic of a Snapshot.
type Topic struct {
	Name  string
	Bound backend.RetentionBound
	// Published reports whether the topic was published to since the
	// previous Snapshot.
	Published bool
}

// Add records a publish to topic. It reports whether topic is new to
// the set. A set of Max topics takes no new one.
func (s *Set) Add(topic string) bool {
	if e, ok := s.topics.Load(topic); ok {
		e := e.(*entry)
		if !e.published.Load() {
			e.published.Store(true)
		}
		return false
	}
	return s.store(topic, true)
}

// store adds topic, marked published or not, when the set has room.
func (s *Set) store(topic string, published bool) bool {
	if s.n.Load() >= Max {
		return false
	}
	e := &entry{}
	e.published.Store(published)
	e.active.Store(time.Now().UnixNano())
	if _, loaded := s.topics.LoadOrStore(topic, e); loaded {
		return false
	}
	s.n.Add(1)
	return true
}

// Trimmed records that a pass removed n messages of topic. A topic
// without a bound that has seen no publish and no removal for idleAfter
// leaves the set; the next publish adds it again.
func (s *Set) Trimmed(topic string, n int64, idleAfter time.Duration) {
	v, ok := s.topics.Load(topic)
	if !ok {
		return
	}
	e := v.(*entry)
	now := time.Now().UnixNano()
	if n > 0 || e.published.Load() {
		e.active.Store(now)
		return
	}
	if now-e.active.Load() < int64(idleAfter) {
		return
	}
	s.mu.Lock()
	_, bounded := s.bounds[topic]
	s.mu.Unlock()
	if bounded || !s.topics.CompareAndDelete(topic, v) {
		return
	}
	s.n.Add(-1)
	if e.published.Load() {
		s.store(topic, true) // a publish came in meanwhile
	}
}

// SetBound sets topic's retention bound and adds topic to the set.
func (s *Set) SetBound(topic string, b backend.RetentionBound) {
	s.mu.Lock()
	if s.bounds == nil {
		s.bounds = map[string]backend.RetentionBound{}
	}
	s.bounds[topic] = b
	s.mu.Unlock()
	if _, ok := s.topics.Load(topic); !ok {
		s.n.Add(1) // a bounded topic is kept even past Max
		if _, loaded := s.topics.LoadOrStore(topic, &entry{}); loaded {
			s.n.Add(-1)
		}
	}
}

// Bound returns topic's retention bound, if it has one.
func (s *Set) Bound(topic string) (backend.RetentionBound, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.bounds[topic]
	return b, ok
}

// Snapshot returns the topics of the set in name order and clears their
// published marks.
func (s *Set) Snapshot() []Topic {
	var out []Topic
	now := time.Now().UnixNano()
	s.topics.Range(func(k, v any) bool {
		e := v.(*entry)
		published := e.published.Swap(false)
		if published {
			e.active.Store(now)
		}
		out = append(out, Topic{Name: k.(string), Published: published})
		return true
	})
	s.mu.Lock()
	for i := range out {
		out[i].Bound = s.bounds[out[i].Name]
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
