// Package trimset holds the topics a backend trims on its own, with no
// subscriber running: those its Backend published to, and the retention
// bounds set on them (backend.RetentionBounder). The Redis and
// PostgreSQL backends trim each topic of their set every trim interval.
package trimset

import (
	"sort"
	"sync"
	"sync/atomic"

	"github.com/eventbus-go/bus/backend"
)

// Set is a set of topics, each with an optional retention bound and a
// count of publishes since its last pass. It is safe for concurrent use;
// Add, on the publish path, costs one map lookup for a known topic.
type Set struct {
	topics sync.Map // string -> *entry
	mu     sync.Mutex
	bounds map[string]backend.RetentionBound
}

type entry struct {
	published atomic.Bool
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
// the set.
func (s *Set) Add(topic string) bool {
	if e, ok := s.topics.Load(topic); ok {
		e := e.(*entry)
		if !e.published.Load() {
			e.published.Store(true)
		}
		return false
	}
	e := &entry{}
	e.published.Store(true)
	_, loaded := s.topics.LoadOrStore(topic, e)
	return !loaded
}

// SetBound sets topic's retention bound and adds topic to the set.
func (s *Set) SetBound(topic string, b backend.RetentionBound) {
	s.mu.Lock()
	if s.bounds == nil {
		s.bounds = map[string]backend.RetentionBound{}
	}
	s.bounds[topic] = b
	s.mu.Unlock()
	s.topics.LoadOrStore(topic, &entry{})
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
	s.topics.Range(func(k, v any) bool {
		out = append(out, Topic{Name: k.(string), Published: v.(*entry).published.Swap(false)})
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

// Len returns the number of topics in the set.
func (s *Set) Len() int {
	n := 0
	s.topics.Range(func(any, any) bool { n++; return true })
	return n
}
