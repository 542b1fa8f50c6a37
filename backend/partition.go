package backend

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"
)

// Partitioner is implemented by backends that store partitioned topics.
// The bus builds partitions out of the other primitives: partition p of
// topic T is stored as the topic PartitionTopic(T, p), one log per
// partition, and the members of a group own partitions exclusively through
// the GroupLocker lock of their partition topic. What the bus needs from
// the backend is the partition count, stored with the topic at the broker,
// and a list of the group's live members, from which every member derives
// the same assignment (see AssignPartitions). A backend that implements
// Partitioner implements GroupLocker too.
//
// The conformance suite checks that a count is recorded once, that a
// different count is refused, and that members come and go with their
// heartbeats.
type Partitioner interface {
	// Partitions returns the partition count recorded for topic. When none
	// is recorded and n > 0 it records n first, atomically: of two callers
	// that record different counts at once, both get the one that won.
	// With n == 0 it only reads, and returns 0 when none is recorded. It
	// returns by ctx's deadline.
	Partitions(ctx context.Context, topic string, n int) (int, error)
	// Heartbeat records member as a live member of group on topic until
	// ttl from now and returns the live members (the caller among them),
	// sorted. A member that stopped calling Heartbeat drops out of the
	// list ttl after its last call.
	Heartbeat(ctx context.Context, topic, group, member string, ttl time.Duration) ([]string, error)
	// Members returns the live members of group on topic, sorted, without
	// joining.
	Members(ctx context.Context, topic, group string) ([]string, error)
	// Leave removes member from the group's live members at once.
	Leave(ctx context.Context, topic, group, member string) error
}

// MaxPartitions bounds a topic's partition count.
const MaxPartitions = 1024

// ErrPartitionMismatch is wrapped by the error of a call that asks for a
// topic's partition count to be other than the one recorded at the
// broker: a topic's partitions are set once, when it is created.
var ErrPartitionMismatch = errors.New("partition count mismatch")

// partitionSep joins a topic and a partition index. No valid topic holds
// it (see ValidateTopic), so a partition topic never names a user topic.
const partitionSep = "~"

// PartitionTopic returns the name under which partition p of topic is
// stored: "orders~3". Partition topics are valid names for every backend
// of this module (letters, digits, ". _ - :" and "~").
func PartitionTopic(topic string, p int) string {
	return topic + partitionSep + strconv.Itoa(p)
}

// SplitPartitionTopic reports the topic and partition of a partition
// topic; ok is false for any other name.
func SplitPartitionTopic(name string) (topic string, p int, ok bool) {
	i := strings.LastIndex(name, partitionSep)
	if i <= 0 {
		return "", 0, false
	}
	n, err := strconv.Atoi(name[i+1:])
	if err != nil || n < 0 || strconv.Itoa(n) != name[i+1:] {
		return "", 0, false
	}
	return name[:i], n, true
}

// PartitionOf returns the partition of a message among n (n >= 1): the
// 32-bit FNV-1a hash of its Key, modulo n, when the Key is not empty, and
// of its ID otherwise (IDs are unique, so unkeyed messages spread evenly,
// and a publish retried with the same ID lands where the first did). Every
// backend and every language client must use this function.
func PartitionOf(key, id string, n int) int {
	if n <= 1 {
		return 0
	}
	s := key
	if s == "" {
		s = id
	}
	h := uint32(2166136261) // FNV-1a offset basis
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619 // FNV prime
	}
	return int(h % uint32(n))
}

// AssignPartitions returns the partitions that member owns when the
// group's live members are members (sorted, as Heartbeat returns them):
// partition p belongs to members[p mod len(members)]. A member missing from
// members owns none.
func AssignPartitions(members []string, member string, n int) []int {
	idx := -1
	for i, m := range members {
		if m == member {
			idx = i
			break
		}
	}
	if idx < 0 {
		return nil
	}
	var ps []int
	for p := idx; p < n; p += len(members) {
		ps = append(ps, p)
	}
	return ps
}

// NativePartitioner is implemented by backends whose topics have
// partitions of their own (Kafka), in place of Partitioner. The bus's
// CreateTopic records a topic's count through it and then publishes and
// subscribes to the topic as to any other: the backend stores the topic
// as one topic of n partitions, routes every message of one key to one
// partition (by its own hash of the key where the broker's ecosystem has
// one, so that producers outside the bus agree; else PartitionOf), and
// gives a group's partitions to its
// members through its own assignment, each partition to one member at a
// time, handed over as Capabilities.KeyOwnership says. A backend that
// implements NativePartitioner declares KeyOwnership and does not
// implement Partitioner.
type NativePartitioner interface {
	// TopicPartitions returns topic's partition count. When the topic
	// does not exist and n > 0 it creates it with n partitions first: of
	// two callers that create it with different counts at once, both get
	// the one that won. With n == 0 it only reads, and returns 0 when
	// the topic does not exist. It returns by ctx's deadline.
	TopicPartitions(ctx context.Context, topic string, n int) (int, error)
}

// Idler is implemented by subscriptions whose backend's own group
// assignment can leave a member with nothing to fetch
// (Capabilities.KeyOwnership: a group with more members than its topic
// has partitions). Idle reports whether the member owns no partition now;
// the bus reports it as the subscription's health's Standby.
type Idler interface {
	Idle() bool
}
