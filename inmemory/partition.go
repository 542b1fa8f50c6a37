package inmemory

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/eventbus-go/bus/backend"
)

var _ backend.Partitioner = (*Backend)(nil)

// partitions are the partition counts and group members of a broker
// (backend.Partitioner).
type partitions struct {
	mu      sync.Mutex
	counts  map[string]int                  // by topic
	members map[string]map[string]time.Time // by topic + "\x00" + group: member -> alive until
}

// Partitions implements backend.Partitioner.
func (b *Backend) Partitions(ctx context.Context, topic string, n int) (int, error) {
	if b.closed.Load() {
		return 0, fmt.Errorf("inmemory: partitions of %q: %w", topic, backend.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	p := &b.br.parts
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.counts[topic]; ok || n <= 0 {
		return c, nil
	}
	if p.counts == nil {
		p.counts = map[string]int{}
	}
	p.counts[topic] = n
	return n, nil
}

// Heartbeat implements backend.Partitioner.
func (b *Backend) Heartbeat(ctx context.Context, topic, group, member string, ttl time.Duration) ([]string, error) {
	if b.closed.Load() {
		return nil, fmt.Errorf("inmemory: heartbeat of group %q on %q: %w", group, topic, backend.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return b.br.parts.live(topic+"\x00"+group, member, ttl, time.Now()), nil
}

// Members implements backend.Partitioner.
func (b *Backend) Members(ctx context.Context, topic, group string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return b.br.parts.live(topic+"\x00"+group, "", 0, time.Now()), nil
}

// Leave implements backend.Partitioner.
func (b *Backend) Leave(_ context.Context, topic, group, member string) error {
	p := &b.br.parts
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.members[topic+"\x00"+group], member)
	return nil
}

// live records member (when not empty) until now+ttl, forgets the members
// that lapsed and returns the others, sorted.
func (p *partitions) live(key, member string, ttl time.Duration, now time.Time) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.members == nil {
		p.members = map[string]map[string]time.Time{}
	}
	ms := p.members[key]
	if ms == nil {
		ms = map[string]time.Time{}
		p.members[key] = ms
	}
	if member != "" {
		ms[member] = now.Add(ttl)
	}
	out := make([]string, 0, len(ms))
	for m, until := range ms {
		if !now.Before(until) {
			delete(ms, m)
			continue
		}
		out = append(out, m)
	}
	slices.Sort(out)
	return out
}
