package bus_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/inmemory"
	"github.com/eventbus-go/bus/observer"
)

// member is one process's view of a shared mem broker: its Bus's Close
// leaves the broker open for the others.
type member struct{ *inmemory.Backend }

func (member) Close() error { return nil }

func TestCreateTopicSetsThePartitionsOnce(t *testing.T) {
	b := newMemBus(t)
	defer closeBus(t, b)
	ctx := context.Background()
	require.NoError(t, b.CreateTopic(ctx, "orders", 4))
	require.NoError(t, b.CreateTopic(ctx, "orders", 4), "the same count again is not an error")
	err := b.CreateTopic(ctx, "orders", 8)
	require.ErrorIs(t, err, bus.ErrPartitionMismatch, "another count is refused")
	require.NoError(t, b.Publish(ctx, "used", &bus.Message{Payload: []byte("x")}))
	require.ErrorIs(t, b.CreateTopic(ctx, "used", 4), bus.ErrPartitionMismatch, "a topic used unpartitioned stays so")
	require.ErrorIs(t, b.CreateTopic(ctx, "orders", 0), bus.ErrInvalidOption)
	require.ErrorIs(t, b.CreateTopic(ctx, "bad~topic", 2), bus.ErrInvalidTopic)
}

// Publish stores a keyed message in partition PartitionOf(Key) and every
// message of a key in one partition.
func TestPublishRoutesKeysToTheirPartition(t *testing.T) {
	be, err := inmemory.New(nil)
	require.NoError(t, err)
	b := bus.New(be)
	defer closeBus(t, b)
	ctx := context.Background()
	require.NoError(t, b.CreateTopic(ctx, "orders", 3))
	for i := range 30 {
		require.NoError(t, b.Publish(ctx, "orders", &bus.Message{Key: "k" + strconv.Itoa(i%5), Payload: []byte{byte(i)}}))
	}
	ts, err := b.Topics(ctx)
	require.NoError(t, err)
	counts := map[string]int64{}
	for _, ti := range ts {
		counts[ti.Name] = int64(ti.Messages)
	}
	want := map[string]int64{}
	for i := range 30 {
		want[bus.PartitionTopic("orders", backend.PartitionOf("k"+strconv.Itoa(i%5), "", 3))]++
	}
	assert.Equal(t, want, counts, "each partition holds the messages of its keys")
}

// Two members of a group share a partitioned topic: each partition is
// handled by one member at a time, every message arrives, each key in
// publish order, and both members take part.
func TestPartitionedGroupSharesPartitionsAndKeepsKeyOrder(t *testing.T) {
	shared, err := inmemory.New(nil)
	require.NoError(t, err)
	defer shared.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pub := bus.New(member{shared})
	defer closeBus(t, pub)
	require.NoError(t, pub.CreateTopic(ctx, "orders", 4))

	var mu sync.Mutex
	seen := map[string][]int{} // key -> sequence numbers in handling order
	byMember := map[int]int{}
	var handled int
	for i := range 2 {
		b := bus.New(member{shared}, bus.WithObserver(observer.Nop()))
		defer closeBus(t, b)
		_, err := b.Subscribe(ctx, "orders", func(_ context.Context, d *bus.Delivery) error {
			assert.Equal(t, "orders", d.Topic, "the handler sees the topic, not the partition")
			seq, _ := strconv.Atoi(string(d.Payload))
			mu.Lock()
			seen[d.Key] = append(seen[d.Key], seq)
			byMember[i]++
			handled++
			mu.Unlock()
			return nil
		}, bus.WithGroup("g"), bus.WithKeyOrdering(), bus.WithAckTimeout(time.Second))
		require.NoError(t, err)
	}
	const keys = 8
	sent := 0
	publish := func(n int) {
		for range n {
			require.NoError(t, pub.Publish(ctx, "orders", &bus.Message{Key: fmt.Sprintf("k%d", sent%keys), Payload: []byte(strconv.Itoa(sent))}))
			sent++
		}
	}
	publish(40)
	require.Eventually(t, func() bool {
		publish(8)
		mu.Lock()
		defer mu.Unlock()
		return byMember[0] > 0 && byMember[1] > 0
	}, 10*time.Second, 20*time.Millisecond, "both members handle partitions")
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return handled >= sent
	}, 10*time.Second, 10*time.Millisecond, "every message handled")
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, sent, handled, "each message handled once")
	for k, seqs := range seen {
		for j := 1; j < len(seqs); j++ {
			require.Less(t, seqs[j-1], seqs[j], "key %s in publish order: %v", k, seqs)
		}
	}
}

// The ledger of a partitioned topic through a crash: K keys × M members
// share 4 partitions, a member that handles messages crashes mid-run (no
// Close, no heartbeat, no ack); the others take its partitions over.
// Every message is handled, each key in publish order: only what the
// crashed member handled without its ack arriving comes again, and
// nothing of a key runs after a later message of the key.
func TestPartitionedLedgerThroughAMemberCrash(t *testing.T) {
	const keys, perKey, members = 8, 40, 3
	const lease = 300 * time.Millisecond
	shared, err := inmemory.New(nil)
	require.NoError(t, err)
	defer shared.Close()
	admin := bus.New(member{shared})
	defer closeBus(t, admin)
	require.NoError(t, admin.CreateTopic(context.Background(), "orders", 4))
	var mu sync.Mutex
	order := map[string][]int{}    // key -> sequence numbers in handling order, all members
	by := map[string]map[int]int{} // key -> seq -> the member that first handled it
	handled := map[string]bool{}
	backends, active := ledgerMembers(t, shared, members, lease, func(i int, key string, seq int, id string) {
		mu.Lock()
		defer mu.Unlock()
		order[key] = append(order[key], seq)
		if by[key] == nil {
			by[key] = map[int]int{}
		}
		if _, ok := by[key][seq]; !ok {
			by[key][seq] = i
		}
		handled[id] = true
	})
	victim := crashMidLedger(t, admin, keys, perKey, backends, active, func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(handled)
	}, 30*time.Second)
	mu.Lock()
	defer mu.Unlock()
	for key, seqs := range order {
		top := -1
		for _, seq := range seqs {
			if seq <= top {
				// Again: only what the crashed member handled first,
				// and never after a later message of its key.
				require.Equal(t, victim, by[key][seq], "key %s: %d handled again though the crashed member never had it: %v", key, seq, seqs)
				continue
			}
			require.Equal(t, top+1, seq, "key %s skipped ahead to %d after %d: %v", key, seq, top, seqs)
			top = seq
		}
		require.Equal(t, perKey-1, top, "key %s: every message handled", key)
	}
	t.Logf("ledger: %d keys × %d messages, %d members on 4 partitions, member %d crashed: lost 0, no key out of order", keys, perKey, members, victim)
}

// TestPartitionTopicNamesRoundTrip checks the names Bus.Topics lists for
// a partitioned topic: PartitionTopic makes them, SplitPartitionTopic
// reads them back, and a plain topic is no partition.
func TestPartitionTopicNamesRoundTrip(t *testing.T) {
	name := bus.PartitionTopic("orders", 3)
	require.Equal(t, "orders~3", name)
	require.NoError(t, bus.ValidateTopic("orders"))
	topic, p, ok := bus.SplitPartitionTopic(name)
	require.True(t, ok, "%q is a partition topic", name)
	assert.Equal(t, "orders", topic)
	assert.Equal(t, 3, p)
	_, _, ok = bus.SplitPartitionTopic("orders")
	assert.False(t, ok, "a plain topic is no partition")
	require.ErrorIs(t, bus.ValidateTopic(""), bus.ErrInvalidTopic)
}
