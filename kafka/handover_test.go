package kafka_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/testkit/kafkatest"
	"github.com/eventbus-go/bus/kafka"
	"github.com/eventbus-go/bus/observer"
)

// handoverLog records who handled what: per message, the members that
// started it and whether one is running it; per key, the order of the
// completions. Safe for concurrent use.
type handoverLog struct {
	mu       sync.Mutex
	starts   map[string][]int // payload -> members that started it, in order
	running  map[string]bool
	order    map[string][]int // key -> seqs completed, in order
	overlaps []string         // a member started what another was running
	attempts []string         // deliveries with Attempt > 1
	by       map[int]int      // member -> messages it completed
}

func (l *handoverLog) start(member int, d *bus.Delivery) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := string(d.Payload)
	if l.running[p] {
		l.overlaps = append(l.overlaps, fmt.Sprintf("%s started by member %d while another member ran it", p, member))
	}
	l.running[p] = true
	l.starts[p] = append(l.starts[p], member)
	if d.Attempt > 1 {
		l.attempts = append(l.attempts, fmt.Sprintf("%s attempt %d on member %d", p, d.Attempt, member))
	}
}

func (l *handoverLog) end(member int, d *bus.Delivery) {
	var key string
	var seq int
	_, _ = fmt.Sscanf(string(d.Payload), "%s %d", &key, &seq)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.running[string(d.Payload)] = false
	l.order[key] = append(l.order[key], seq)
	l.by[member]++
}

func (l *handoverLog) completed() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, seqs := range l.order {
		n += len(seqs)
	}
	return n
}

// testRevokeWaitsForDeliveries: member A of a key-ordered group owns both
// partitions of a topic and is running the head of every key when
// member B joins. The partition that moves to B reaches it only once A's
// deliveries of it finished (within half the session timeout): no
// message is started by B while A runs it, none is delivered twice, and
// every key completes in publish order across the two members.
func testRevokeWaitsForDeliveries(t *testing.T, node *kafkatest.Node) {
	const keys, perKey, session = 8, 5, 10 * time.Second
	topic, group := "handover", "handover"
	open := func() *bus.Bus {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		be, err := kafka.New(ctx, &kafka.Options{Seeds: []string{node.Addr()}, SessionTimeout: session, Partitions: 2})
		require.NoError(t, err, "open a backend")
		b := bus.New(be, bus.WithObserver(observer.Nop()))
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			require.NoError(t, b.Close(ctx), "close a member")
		})
		return b
	}
	log := &handoverLog{starts: map[string][]int{}, running: map[string]bool{}, order: map[string][]int{}, by: map[int]int{}}
	release := make(chan struct{})
	heads := make(chan struct{}, keys*perKey)
	handler := func(member int) bus.Handler {
		return func(ctx context.Context, d *bus.Delivery) error {
			log.start(member, d)
			if member == 0 {
				select {
				case heads <- struct{}{}:
				default:
				}
				select {
				case <-release: // A's handlers run until B has joined
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			log.end(member, d)
			return nil
		}
	}
	opts := []bus.SubscribeOption{bus.WithGroup(group), bus.WithKeyOrdering(), bus.WithMaxInFlight(keys), bus.WithAckTimeout(30 * time.Second)}
	a := open()
	_, err := a.Subscribe(context.Background(), topic, handler(0), opts...)
	require.NoError(t, err, "member A joins")

	batch := func(from, to int) []*bus.Message {
		var msgs []*bus.Message
		for seq := from; seq < to; seq++ {
			for k := range keys {
				key := fmt.Sprintf("k%d", k)
				msgs = append(msgs, &bus.Message{Key: key, Payload: fmt.Appendf(nil, "%s %d", key, seq)})
			}
		}
		return msgs
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, a.Publish(ctx, topic, batch(0, perKey)...))
	for range keys { // A runs the head of every key
		select {
		case <-heads:
		case <-ctx.Done():
			t.Fatal("member A did not start the head of every key")
		}
	}

	b := open()
	joined := make(chan error, 1)
	go func() {
		_, err := b.Subscribe(context.Background(), topic, handler(1), opts...)
		joined <- err
	}()
	// Once B is in the group, the rebalance that moves a partition to it
	// is under way; A's heads go on for a second of work before they
	// finish, well within the revoke's wait (half the session).
	cl, err := kgo.NewClient(kgo.SeedBrokers(node.Addr()))
	require.NoError(t, err)
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for {
		groups, err := adm.DescribeGroups(ctx, group)
		if err == nil && len(groups[group].Members) == 2 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("member B did not join the group")
		case <-time.After(20 * time.Millisecond):
		}
	}
	work := time.AfterFunc(time.Second, func() { close(release) })
	defer work.Stop()
	select {
	case err := <-joined:
		require.NoError(t, err, "member B joins")
	case <-ctx.Done():
		t.Fatal("member B's Subscribe did not return")
	}
	// The second half goes to both members' partitions.
	require.NoError(t, a.Publish(ctx, topic, batch(perKey, 2*perKey)...))
	for log.completed() < 2*keys*perKey {
		select {
		case <-ctx.Done():
			t.Fatalf("completed %d of %d messages", log.completed(), 2*keys*perKey)
		case <-time.After(20 * time.Millisecond):
		}
	}

	log.mu.Lock()
	defer log.mu.Unlock()
	t.Logf("handover: %d keys × %d messages on 2 partitions; member A completed %d, member B %d", keys, 2*perKey, log.by[0], log.by[1])
	assert.Empty(t, log.overlaps, "no message started by one member while the other ran it")
	assert.Empty(t, log.attempts, "no message delivered again")
	assert.Positive(t, log.by[1], "a partition moved to member B")
	for k := range keys {
		key := fmt.Sprintf("k%d", k)
		assert.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, log.order[key], "key %s completed once each, in publish order", key)
	}
}
