package conformance

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	bus "github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/testkit/crashtest"
	"github.com/eventbus-go/bus/internal/testkit/keyledger"
)

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
	log := keyledger.New()
	active := make(chan int, 64)
	views := make([]*crashtest.Member, members)
	for i := range members {
		views[i] = crashtest.New(h.be)
		b := s.memberBus(t, views[i])
		_, err := b.Subscribe(context.Background(), topic, func(ctx context.Context, d *bus.Delivery) error {
			if views[i].Dead() {
				<-ctx.Done() // a killed process does nothing more
				return ctx.Err()
			}
			log.Add(i, d)
			trySend(active, i)
			return nil
		}, bus.WithGroup(group), bus.WithKeyOrdering(), bus.WithAckTimeout(s.ackTimeout()), bus.WithMaxInFlight(8))
		require.NoError(t, err)
	}
	h.publish(topic, keyledger.Messages(keys, 0, perKey/2)...)
	victim := recv(t, s, active, "a member handles the first messages")
	views[victim].Crash()
	log.Crash(victim)
	h.publish(topic, keyledger.Messages(keys, perKey/2, perKey)...)
	s.eventually(t, func() bool { return log.Count() == keys*perKey }, "every message handled after the crash")
	log.Check(t, keys, perKey)
	t.Logf("ledger: %d keys × %d messages, %d members, %d partition(s), member %d killed mid-run: lost 0, no key out of order", keys, perKey, members, partitions, victim)
}
