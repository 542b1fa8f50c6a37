package bus

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/msgid"
	"github.com/eventbus-go/bus/internal/partition"
	"github.com/eventbus-go/bus/internal/slots"
	"github.com/eventbus-go/bus/observer"
)

// This file holds partitioned topics. A topic has N partitions, recorded
// with the topic at the broker when it is created (CreateTopic) and read
// by every publisher and subscriber; a topic used before it was created
// has one. Partition p of topic T is stored as its own log, named
// "T~p". Publish routes a message to backend.PartitionOf(Key, ID, N); the
// members of a group own the partitions exclusively (package
// internal/partition). See docs/ordering.md.

// CreateTopic creates topic with the given number of partitions (1 to
// 1024), stored at the broker: every publisher and subscriber of the
// topic, in any process, reads it from there. A topic's partitions are set
// once: creating it again with the same count is not an error, with another
// count it is an error wrapping ErrPartitionMismatch, and so is
// creating a topic that was already used (published to or subscribed to)
// with a count other than 1. It needs a backend that implements
// backend.Partitioner and backend.GroupLocker for more than one
// partition, or one whose topics have partitions of their own
// (backend.NativePartitioner: Kafka), where the topic is one broker topic
// of that many partitions and a topic already used has the count it was
// created with.
func (b *Bus) CreateTopic(ctx context.Context, topic string, partitions int) error {
	if err := backend.ValidateTopic(topic); err != nil {
		return fmt.Errorf("bus: create topic: %w", err)
	}
	if partitions < 1 || partitions > backend.MaxPartitions {
		return fmt.Errorf("bus: create topic %q: %w: %d partitions, want 1 to %d", topic, ErrInvalidOption, partitions, backend.MaxPartitions)
	}
	if b.optErr != nil {
		return b.optErr
	}
	pt, ok := b.partitioner()
	if ok {
		n, err := pt.Partitions(ctx, topic, partitions)
		if !errors.Is(err, ErrUnsupported) {
			if err != nil {
				return fmt.Errorf("bus: create topic %q: %w", topic, err)
			}
			if n != partitions {
				return fmt.Errorf("bus: create topic %q with %d partitions: %w: it has %d", topic, partitions, backend.ErrPartitionMismatch, n)
			}
			b.parts.Store(topic, n)
			return nil
		}
	}
	if np, ok := b.be.(backend.NativePartitioner); ok && b.caps.KeyOwnership {
		// The backend's own partitions: the topic is published to and
		// subscribed to as an unpartitioned one, so nothing is stored
		// in b.parts.
		n, err := np.TopicPartitions(ctx, topic, partitions)
		if !errors.Is(err, ErrUnsupported) {
			if err != nil {
				return fmt.Errorf("bus: create topic %q: %w", topic, err)
			}
			if n != partitions {
				return fmt.Errorf("bus: create topic %q with %d partitions: %w: it has %d", topic, partitions, backend.ErrPartitionMismatch, n)
			}
			return nil
		}
	}
	if partitions == 1 {
		return nil
	}
	return fmt.Errorf("bus: create topic %q: %w: %s has no partitioned topics", topic, ErrUnsupported, b.caps.Name)
}

// partitioner returns the backend's Partitioner when partitioned topics
// can work on it: with group locks, on an at-least-once backend.
func (b *Bus) partitioner() (backend.Partitioner, bool) {
	pt, ok := b.be.(backend.Partitioner)
	if _, locks := b.be.(backend.GroupLocker); !ok || !locks || !b.caps.Redelivery {
		return nil, false
	}
	return pt, true
}

// partitionsOf returns topic's partition count, read once per topic and
// bus (it never changes), recording 1 when the topic has none yet, so
// that a topic used unpartitioned can never later be partitioned under
// the feet of its publishers.
func (b *Bus) partitionsOf(ctx context.Context, topic string) (int, error) {
	if n, ok := b.parts.Load(topic); ok {
		return n.(int), nil
	}
	pt, ok := b.partitioner()
	if !ok {
		return 1, nil
	}
	n, err := pt.Partitions(ctx, topic, 1)
	if errors.Is(err, ErrUnsupported) {
		n, err = 1, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read the partitions of %q: %w", topic, err)
	}
	n = max(n, 1)
	b.parts.Store(topic, n)
	return n, nil
}

// publishPartitioned publishes msgs to the partitions of topic, each
// partition's messages in their order in msgs, as sendBatch does with
// direct. Failures carry their index in msgs.
func (b *Bus) publishPartitioned(ctx context.Context, topic string, n int, msgs []*backend.Message, direct bool) error {
	byPart := make(map[int][]int, min(n, len(msgs)))
	var order []int
	for i, m := range msgs {
		p := backend.PartitionOf(m.Key, m.ID, n)
		if _, ok := byPart[p]; !ok {
			order = append(order, p)
		}
		byPart[p] = append(byPart[p], i)
	}
	var failed []backend.Failure
	for _, p := range order {
		idx := byPart[p]
		part := make([]*backend.Message, len(idx))
		for j, i := range idx {
			part[j] = msgs[i]
		}
		err := b.sendBatch(ctx, backend.PartitionTopic(topic, p), part, direct)
		if err == nil {
			continue
		}
		var be *backend.BatchError
		if !errors.As(err, &be) {
			for _, i := range idx {
				failed = append(failed, backend.Failure{Index: i, Err: err})
			}
			continue
		}
		for _, f := range be.Failed {
			if f.Index >= 0 && f.Index < len(idx) {
				failed = append(failed, backend.Failure{Index: idx[f.Index], Err: f.Err})
			}
		}
	}
	if failed != nil {
		return &backend.BatchError{Failed: failed}
	}
	return nil
}

// subscribePartitioned runs h on the partitions of topic that this member
// owns (see internal/partition). MaxInFlight bounds the member as a whole:
// each owned partition gets an equal share of it (at least 1), so that an
// idle partition's fetch never holds capacity a busy one needs; the shares
// follow the assignment. A WithLimiter limiter is shared as given.
func (b *Bus) subscribePartitioned(ctx context.Context, topic string, n int, h Handler, o subscribeOptions) (*Subscription, error) {
	pt, _ := b.partitioner()
	locker, _ := b.be.(backend.GroupLocker)
	shares := &partitionShares{total: o.maxInFlight, slots: map[int]*slots.Pool{}}
	member := memberName()
	s := &Subscription{topic: topic, group: o.group, member: member, bus: b}
	ctrl := b.autoscaler(s, n, o)
	m, err := partition.Start(ctx, partition.Config{
		Topic: topic, Group: o.group, Partitions: n, Member: member,
		TTL: partitionTTL(o.ackTimeout), Store: pt, Handover: o.ackTimeout,
		Assigned: shares.assign,
		Observe:  func(e observer.Event) { b.opts.observer.Observe(context.Background(), e) },
		Ended:    stopThen(ctrl, func() { b.forget(s) }),
		Open: func(ctx context.Context, p int) (partition.Runner, error) {
			ptopic := backend.PartitionTopic(topic, p)
			bsub, err := b.be.Subscribe(ctx, ptopic, b.backendConfig(o))
			if err != nil {
				return nil, err
			}
			cfg := b.consumerConfig(s, ptopic, o, h)
			// A holder of the partition's own: a partition handed over
			// and given back to this member runs again only once the
			// runner that drains it has released its lock.
			cfg.Locker, cfg.LockHolder = locker, member+"/"+msgid.New()
			if cfg.KeyOrdering {
				cfg.MaxWaiting = max(1, o.waitingBound()/n)
			}
			var lim Limiter = &concurrencyLimiter{slots: shares.of(p)}
			if o.limiter != nil {
				lim = chainLimiter{o.limiter, lim}
			}
			cfg.Limiter = lim
			if ctrl != nil {
				cfg.scale(ctrl)
			}
			return newConsumer(ctx, b, nil, cfg, bsub), nil
		},
	})
	if err != nil {
		return nil, err
	}
	s.run, s.parts = m, m
	if ctrl != nil {
		ctrl.Start()
	}
	return s, nil
}

// partitionShares splits a member's in-flight bound over the partitions
// it owns. Safe for concurrent use.
type partitionShares struct {
	total int
	mu    sync.Mutex
	owned int
	slots map[int]*slots.Pool
}

func (ps *partitionShares) share() int { return max(1, ps.total/max(ps.owned, 1)) }

// assign sets every partition's share for the partitions now owned.
func (ps *partitionShares) assign(owned []int) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.owned = len(owned)
	for p, sl := range ps.slots {
		if !slices.Contains(owned, p) {
			delete(ps.slots, p)
			continue
		}
		sl.SetLimit(ps.share())
	}
}

// of returns partition p's slots, made with the current share.
func (ps *partitionShares) of(p int) *slots.Pool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	sl := slots.New(ps.share())
	ps.slots[p] = sl
	return sl
}

// partitionTTL is how long a member of a partitioned group stays in it
// without a heartbeat: half the ack timeout, between 1 s and maxLockTTL
// (the partitions' group locks have the same). The partitions of a member
// that died go to the others within about that, and each holds back only
// the keys the dead member left pending (see groupLock).
func partitionTTL(ackTimeout time.Duration) time.Duration {
	return ownerTTL(ackTimeout)
}

// memberName names a member of a partitioned group for the operators who
// read `bus groups`: host, process and a random part unique to the
// subscription.
func memberName() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "host"
	}
	var r [6]byte
	_, _ = rand.Read(r[:]) // never fails (crypto/rand)
	return host + "-" + strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(r[:])
}

// chainLimiter takes capacity from both limiters: the caller's and the
// member's in-flight bound of a partitioned subscription.
type chainLimiter struct{ first, second Limiter }

func (c chainLimiter) Acquire(ctx context.Context, max int) (int, error) {
	n, err := c.first.Acquire(ctx, max)
	if err != nil {
		return 0, err
	}
	m, err := c.second.Acquire(ctx, n)
	if err != nil {
		c.first.Release(n)
		return 0, err
	}
	if m < n {
		c.first.Release(n - m)
	}
	return m, nil
}

func (c chainLimiter) Release(n int) {
	c.second.Release(n)
	c.first.Release(n)
}

// recordedPartitions reads topic's partition count without recording
// one (inspection and deletion): 1 when none is recorded or the backend
// has no partitioned topics.
func (b *Bus) recordedPartitions(ctx context.Context, topic string) (int, error) {
	pt, ok := b.partitioner()
	if !ok {
		return 1, nil
	}
	n, err := pt.Partitions(ctx, topic, 0)
	if err != nil {
		return 0, err
	}
	return max(n, 1), nil
}

// partitionGroups lists the groups of partitions from to to-1 of topic,
// which has n, with each partition's owner.
func (b *Bus) partitionGroups(ctx context.Context, in backend.Inspector, topic string, n, from, to int) ([]backend.GroupInfo, error) {
	pt, _ := b.partitioner() // n > 1: there is one
	members := map[string][]string{}
	var out []backend.GroupInfo
	for p := from; p < to; p++ {
		gs, err := in.Groups(ctx, backend.PartitionTopic(topic, p))
		if err != nil {
			return nil, fmt.Errorf("bus: groups of %q, partition %d: %w", topic, p, err)
		}
		for _, g := range gs {
			ms, ok := members[g.Name]
			if !ok {
				if ms, err = pt.Members(ctx, topic, g.Name); err != nil {
					return nil, fmt.Errorf("bus: members of group %q of %q: %w", g.Name, topic, err)
				}
				members[g.Name] = ms
			}
			g.Partitions, g.Partition = n, p
			if len(ms) > 0 {
				g.Owner = ms[p%len(ms)]
			}
			out = append(out, g)
		}
	}
	return out, nil
}
