package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	bus "github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
)

// partitioner returns the backend's Partitioner, or skips the case.
func (h *harness) partitioner(t *testing.T) backend.Partitioner {
	t.Helper()
	p, ok := h.be.Backend.(backend.Partitioner)
	if !ok {
		t.Skipf("%s does not implement backend.Partitioner", h.s.caps.Name)
	}
	return p
}

// partitionCount returns the backend's record of a topic's partition
// count: its Partitioner's, or (native) its NativePartitioner's, whose
// topics have partitions of their own. The case is skipped where the
// backend has neither.
func (h *harness) partitionCount(t *testing.T) (count func(ctx context.Context, topic string, n int) (int, error), native bool) {
	t.Helper()
	if np, ok := h.be.Backend.(backend.NativePartitioner); ok && h.s.caps.KeyOwnership {
		return np.TopicPartitions, true
	}
	return h.partitioner(t).Partitions, false
}

// partitionOwnership skips the case unless the members of a group can
// own a partitioned topic's partitions: through the group lock, or
// through the backend's own assignment (native partitions). It reports
// which.
func (h *harness) partitionOwnership(t *testing.T) (native bool) {
	t.Helper()
	if _, native = h.partitionCount(t); !native {
		h.locker(t)
	}
	return native
}

// partitionedTopic is a new topic named after name, made with n
// partitions; the case is skipped where the backend has no partitioned
// topics (or none in this mode).
func (h *harness) partitionedTopic(t *testing.T, name string, n int) string {
	t.Helper()
	count, _ := h.partitionCount(t)
	topic := h.topic(name)
	ctx, cancel := context.WithTimeout(context.Background(), h.s.deadline())
	defer cancel()
	if _, err := count(ctx, topic, 0); errors.Is(err, bus.ErrUnsupported) {
		t.Skipf("%s has no partitioned topics in this mode: %v", h.s.caps.Name, err)
	}
	require.NoError(t, h.bus.CreateTopic(ctx, topic, n))
	return topic
}

// testPartitionStore: a topic's count is recorded once and read back; a
// different count does not replace it; members come with their
// heartbeats, go with Leave, and drop out when their heartbeats stop.
// Where topics have partitions of their own (NativePartitioner) the
// members are the backend's, and the count alone is checked.
func testPartitionStore(t *testing.T, s *suite) {
	h := s.newHarness(t)
	count, native := h.partitionCount(t)
	topic, group := h.topic("parts"), h.group("parts")
	ctx, cancel := context.WithTimeout(context.Background(), s.deadline())
	defer cancel()
	n, err := count(ctx, topic, 0)
	if errors.Is(err, bus.ErrUnsupported) {
		t.Skipf("%s has no partitioned topics in this mode: %v", s.caps.Name, err)
	}
	require.NoError(t, err)
	assert.Zero(t, n, "a topic with no record reads 0 and is not recorded")
	n, err = count(ctx, topic, 4)
	require.NoError(t, err)
	assert.Equal(t, 4, n, "the first count is recorded")
	n, err = count(ctx, topic, 8)
	require.NoError(t, err)
	assert.Equal(t, 4, n, "a recorded count is never replaced")
	n, err = count(ctx, topic, 0)
	require.NoError(t, err)
	assert.Equal(t, 4, n, "a recorded count reads back")
	err = h.bus.CreateTopic(ctx, topic, 8)
	require.ErrorIs(t, err, backend.ErrPartitionMismatch, "CreateTopic with another count")
	if native {
		return
	}
	p := h.partitioner(t)
	ttl := s.ackTimeout()
	ms, err := p.Heartbeat(ctx, topic, group, "b", ttl)
	require.NoError(t, err)
	assert.Equal(t, []string{"b"}, ms)
	ms, err = p.Heartbeat(ctx, topic, group, "a", ttl)
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "b"}, ms, "live members, sorted")
	require.NoError(t, p.Leave(ctx, topic, group, "b"))
	// Within the ttl: a member that left is gone before its heartbeat
	// would have lapsed (a replicated store may answer from a replica
	// that is a moment behind).
	s.eventually(t, func() bool {
		ms, err := p.Members(ctx, topic, group)
		return err == nil && slices.Equal(ms, []string{"a"})
	}, "a member that left is gone")
	s.eventually(t, func() bool {
		ms, err := p.Members(ctx, topic, group)
		return err == nil && len(ms) == 0
	}, "a member whose heartbeats stopped drops out after its ttl")
}

// testPartitionedGroup: two members share a partitioned topic, each
// partition owned by one of them; every message is handled once and each
// key in publish order, never two of one key at once. When one member
// closes, the other takes its partitions over and goes on in order.
func testPartitionedGroup(t *testing.T, s *suite) {
	h := s.newHarness(t)
	native := h.partitionOwnership(t)
	topic, group := h.partitionedTopic(t, "parted", 4), h.group("parted")
	ctx, cancel := context.WithTimeout(context.Background(), s.deadline())
	defer cancel()
	log := newKeyLog()
	owners := &memberLog{by: map[string]map[int]bool{}}
	member := func(id int) bus.Handler {
		return func(_ context.Context, d *bus.Delivery) error {
			log.start(d)
			owners.add(d.Key, id)
			log.end(d, true)
			return nil
		}
	}
	opts := []bus.SubscribeOption{bus.WithGroup(group), bus.WithKeyOrdering(), bus.WithMaxInFlight(8), bus.WithAckTimeout(s.ackTimeout())}
	first := h.subscribe(context.Background(), topic, member(1), opts...)
	h.subscribe(context.Background(), topic, member(2), opts...)
	if !native {
		p := h.partitioner(t)
		s.eventually(t, func() bool {
			ms, err := p.Members(ctx, topic, group)
			return err == nil && len(ms) == 2
		}, "the two members join the group")
	}

	// Until both members have handled messages: the first one owns every
	// partition until its next heartbeat shows it the second.
	// Sixteen keys reach every one of the 4 partitions under the bus's
	// routing and under a backend's own (Kafka's murmur2).
	var batch1 []*bus.Message
	s.eventually(t, func() bool {
		more := keyed(16, 2)
		for _, m := range more {
			m.Payload = fmt.Appendf(m.Payload, "/%d", len(batch1))
		}
		h.publish(topic, more...)
		batch1 = append(batch1, more...)
		return owners.members() == 2
	}, "both members own partitions")
	s.eventually(t, func() bool { return log.total.Load() >= int64(len(batch1)) }, "the first batch handled")
	require.NoError(t, first.Close(ctx), "close the first member")

	batch2 := keyed(8, count(10, 4))
	for _, m := range batch2 {
		m.Payload = append([]byte("2:"), m.Payload...)
	}
	h.publish(topic, batch2...)
	s.eventually(t, func() bool { return log.total.Load() >= int64(len(batch1)+len(batch2)) },
		"the member left takes every partition over")
	log.assertInOrderUnlessLeaseLost(t, append(batch1, batch2...))
}

// memberLog records which members handled each key. Safe for concurrent
// use.
type memberLog struct {
	mu sync.Mutex
	by map[string]map[int]bool
}

func (l *memberLog) add(key string, member int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.by[key] == nil {
		l.by[key] = map[int]bool{}
	}
	l.by[key][member] = true
}

// members is how many members handled anything.
func (l *memberLog) members() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	all := map[int]bool{}
	for _, ms := range l.by {
		for m := range ms {
			all[m] = true
		}
	}
	return len(all)
}

// TopicPartitions forwards to the backend's NativePartitioner, when it
// has one.
func (c *countingBackend) TopicPartitions(ctx context.Context, topic string, n int) (int, error) {
	np, ok := c.Backend.(backend.NativePartitioner)
	if !ok {
		return 0, fmt.Errorf("conformance: %w: no backend.NativePartitioner", bus.ErrUnsupported)
	}
	return np.TopicPartitions(ctx, topic, n)
}

// Partitions forwards to the backend's Partitioner, when it has one.
func (c *countingBackend) Partitions(ctx context.Context, topic string, n int) (int, error) {
	p, err := c.partitioner()
	if err != nil {
		return 0, err
	}
	return p.Partitions(ctx, topic, n)
}

// Heartbeat forwards to the backend's Partitioner, when it has one.
func (c *countingBackend) Heartbeat(ctx context.Context, topic, group, member string, ttl time.Duration) ([]string, error) {
	p, err := c.partitioner()
	if err != nil {
		return nil, err
	}
	return p.Heartbeat(ctx, topic, group, member, ttl)
}

// Members forwards to the backend's Partitioner, when it has one.
func (c *countingBackend) Members(ctx context.Context, topic, group string) ([]string, error) {
	p, err := c.partitioner()
	if err != nil {
		return nil, err
	}
	return p.Members(ctx, topic, group)
}

// Leave forwards to the backend's Partitioner, when it has one.
func (c *countingBackend) Leave(ctx context.Context, topic, group, member string) error {
	p, err := c.partitioner()
	if err != nil {
		return err
	}
	return p.Leave(ctx, topic, group, member)
}

func (c *countingBackend) partitioner() (backend.Partitioner, error) {
	p, ok := c.Backend.(backend.Partitioner)
	if !ok {
		return nil, fmt.Errorf("conformance: %w: no backend.Partitioner", bus.ErrUnsupported)
	}
	return p, nil
}
