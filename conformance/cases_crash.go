package conformance

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	bus "github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/testkit/crashtest"
	"github.com/eventbus-go/bus/observer"
)

// ledgerLog records, per key, the sequence numbers handled in handling
// order over all members, and which member first handled each.
type ledgerLog struct {
	mu      sync.Mutex
	order   map[string][]int
	first   map[string]map[int]int
	handled map[string]bool
}

func (l *ledgerLog) add(member int, d *bus.Delivery) {
	var key string
	var seq int
	_, _ = fmt.Sscanf(string(d.Payload), "%s %d", &key, &seq)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.order[key] = append(l.order[key], seq)
	if l.first[key] == nil {
		l.first[key] = map[int]int{}
	}
	if _, ok := l.first[key][seq]; !ok {
		l.first[key][seq] = member
	}
	l.handled[d.ID] = true
}

func (l *ledgerLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.handled)
}

// check asserts that every key was handled in publish order, every
// message at least once, and that a message handled again was one the
// crashed member had handled first, never one after a later message of
// its key was handled.
func (l *ledgerLog) check(t *testing.T, keys, perKey, victim int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for k := range keys {
		key := fmt.Sprintf("k%d", k)
		top := -1
		for _, seq := range l.order[key] {
			if seq <= top {
				require.Equal(t, victim, l.first[key][seq], "key %s: %d handled again though the crashed member never had it: %v", key, seq, l.order[key])
				continue
			}
			require.Equal(t, top+1, seq, "key %s skipped ahead to %d after %d: %v", key, seq, top, l.order[key])
			top = seq
		}
		require.Equal(t, perKey-1, top, "key %s: every message handled", key)
	}
}

// ledgerMessages returns the messages from..to-1 of each key ("k<i> <seq>"),
// in publish order.
func ledgerMessages(keys, from, to int) []*bus.Message {
	var msgs []*bus.Message
	for seq := from; seq < to; seq++ {
		for k := range keys {
			key := fmt.Sprintf("k%d", k)
			msgs = append(msgs, &bus.Message{Key: key, Payload: fmt.Appendf(nil, "%s %d", key, seq)})
		}
	}
	return msgs
}

// testKeyOrderLedgerThroughACrash: K keys × M key-ordered members of one
// group; the member that handles first is killed mid-run (every call it
// makes fails from then on). Nothing is lost, and no key goes out of
// order: what the killed member handled without its ack arriving may be
// handled again, before anything after it.
func testKeyOrderLedgerThroughACrash(t *testing.T, s *suite) {
	h := s.newHarness(t)
	h.crashHandover(t)
	runCrashLedger(t, s, h, h.topic("crashledger"), 1)
}

// testPartitionedLedgerThroughACrash: the ledger through a crash on a
// topic of 4 partitions, which the members share; the killed member's
// partitions go to the others.
func testPartitionedLedgerThroughACrash(t *testing.T, s *suite) {
	h := s.newHarness(t)
	h.crashHandover(t)
	topic := h.partitionedTopic(t, "crashparts", 4)
	runCrashLedger(t, s, h, topic, 4)
}

// runCrashLedger runs the ledger through a crash on topic (of partitions
// partitions).
func runCrashLedger(t *testing.T, s *suite, h *harness, topic string, partitions int) {
	group := h.group("crashledger")
	keys, perKey, members := 8, count(20, 10), 3
	log := &ledgerLog{order: map[string][]int{}, first: map[string]map[int]int{}, handled: map[string]bool{}}
	active := make(chan int, 64)
	views := make([]*crashtest.Member, members)
	for i := range members {
		views[i] = crashtest.New(h.be)
		b := bus.New(views[i], bus.WithObserver(observer.Nop()))
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), s.cfg.dur(closeTimeout))
			defer cancel()
			_ = b.Close(ctx) // the crashed member's Close reports what it could not settle
		})
		_, err := b.Subscribe(context.Background(), topic, func(ctx context.Context, d *bus.Delivery) error {
			if views[i].Dead() {
				<-ctx.Done() // a killed process does nothing more
				return ctx.Err()
			}
			log.add(i, d)
			trySend(active, i)
			return nil
		}, bus.WithGroup(group), bus.WithKeyOrdering(), bus.WithAckTimeout(s.ackTimeout()), bus.WithMaxInFlight(8))
		require.NoError(t, err)
	}
	h.publish(topic, ledgerMessages(keys, 0, perKey/2)...)
	victim := recv(t, s, active, "a member handles the first messages")
	views[victim].Crash()
	h.publish(topic, ledgerMessages(keys, perKey/2, perKey)...)
	s.eventually(t, func() bool { return log.count() == keys*perKey }, "every message handled after the crash")
	log.check(t, keys, perKey, victim)
	t.Logf("ledger: %d keys × %d messages, %d members, %d partition(s), member %d killed mid-run: lost 0, no key out of order", keys, perKey, members, partitions, victim)
}
