// Package topiccache keeps what a backend derives from a topic name once
// (stream keys, subjects, boxed arguments) and reads on every Publish, in
// a map that stops growing at a bound: a process that makes up topics
// without end gets the others derived on each call instead of a cache
// that grows without end. It imports only the standard library.
package topiccache

import (
	"sync"
	"sync/atomic"
)

// Max is how many topics a Cache keeps.
const Max = 4096

// Cache maps topics to values of type V. The zero value is empty and
// ready to use; it is safe for concurrent use.
type Cache[V any] struct {
	m sync.Map // topic -> V
	n atomic.Int64
}

// Load returns the value kept for topic, if any.
func (c *Cache[V]) Load(topic string) (V, bool) {
	if v, ok := c.m.Load(topic); ok {
		return v.(V), true
	}
	var zero V
	return zero, false
}

// Store keeps v for topic while the cache is below Max and returns the
// value to use: the one another caller stored first, or v.
func (c *Cache[V]) Store(topic string, v V) V {
	if c.n.Load() >= Max {
		return v
	}
	if actual, loaded := c.m.LoadOrStore(topic, v); loaded {
		return actual.(V)
	}
	c.n.Add(1)
	return v
}
