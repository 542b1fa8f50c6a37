package kafka_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/testkit/faultproxy"
	"github.com/eventbus-go/bus/internal/testkit/kafkatest"
	"github.com/eventbus-go/bus/kafka"
	"github.com/eventbus-go/bus/observer"
)

// crashSession is the group session of testKeyOrderLedgerThroughACrash:
// the bound after which a dead member's partitions move.
const crashSession = 6 * time.Second

// crashLedger records, per key, the sequence numbers handled in
// handling order over all members, which member first handled each,
// and when another member first handled a key the dead member had
// handled. Safe for concurrent use.
type crashLedger struct {
	mu       sync.Mutex
	order    map[string][]int
	first    map[string]map[int]int
	handled  map[string]bool
	victim   int
	victimOf map[string]bool // keys the victim handled
	crashed  time.Time
	resumed  time.Duration // crash to the first of the victim's keys handled by another member
}

func (l *crashLedger) add(member int, d *bus.Delivery) {
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
	if member == l.victim && l.crashed.IsZero() {
		l.victimOf[key] = true
	}
	if member != l.victim && !l.crashed.IsZero() && l.victimOf[key] && l.resumed == 0 {
		l.resumed = time.Since(l.crashed)
	}
	l.handled[d.ID] = true
}

func (l *crashLedger) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.handled)
}

func (l *crashLedger) crash() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.crashed = time.Now()
}

// check asserts that every key was handled in publish order, every
// message at least once, and that a message handled again was one the
// dead member had handled first.
func (l *crashLedger) check(t *testing.T, keys, perKey int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for k := range keys {
		key := fmt.Sprintf("k%d", k)
		top := -1
		for _, seq := range l.order[key] {
			if seq <= top {
				require.Equal(t, l.victim, l.first[key][seq], "key %s: %d handled again though the dead member never had it: %v", key, seq, l.order[key])
				continue
			}
			require.Equal(t, top+1, seq, "key %s skipped ahead to %d after %d: %v", key, seq, top, l.order[key])
			top = seq
		}
		require.Equal(t, perKey-1, top, "key %s: every message handled", key)
	}
}

// crashMessages returns the messages from..to-1 of each key ("k<i> <seq>"),
// in publish order.
func crashMessages(keys, from, to int) []*bus.Message {
	var msgs []*bus.Message
	for seq := from; seq < to; seq++ {
		for k := range keys {
			key := fmt.Sprintf("k%d", k)
			msgs = append(msgs, &bus.Message{Key: key, Payload: fmt.Appendf(nil, "%s %d", key, seq)})
		}
	}
	return msgs
}

// testKeyOrderLedgerThroughACrash: three key-ordered members of one
// group share a topic of four partitions; one member, whose every
// connection goes through a proxy, dies mid-run: its link is cut for
// good (no heartbeat, no commit reaches the broker) and its handlers do
// nothing more. Its partitions move to the others after the group's
// session timeout; nothing is lost, no key goes out of order, and what
// is handled again is only what the dead member had handled without its
// commit arriving.
func testKeyOrderLedgerThroughACrash(t *testing.T, node *kafkatest.Node) {
	const keys, perKey, members, victim = 16, 20, 3, 0
	proxy, err := faultproxy.New(node.Addr())
	require.NoError(t, err)
	open := func(through bool) *bus.Bus {
		opts := &kafka.Options{Seeds: []string{node.Addr()}, RequestTimeout: 3 * time.Second,
			SessionTimeout: crashSession, CloseTimeout: 500 * time.Millisecond, Partitions: 4}
		if through {
			d := &net.Dialer{Timeout: 2 * time.Second}
			opts.Dial = func(ctx context.Context, network, _ string) (net.Conn, error) {
				return d.DialContext(ctx, network, proxy.Addr())
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		be, err := kafka.New(ctx, opts)
		require.NoError(t, err, "open a backend")
		b := bus.New(be, bus.WithObserver(observer.Nop()))
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = b.Close(ctx) // the dead member's Close reports what it could not settle
		})
		return b
	}
	pub := open(false)
	topic, group := "crashledger", "crashledger"
	log := &crashLedger{order: map[string][]int{}, first: map[string]map[int]int{}, handled: map[string]bool{},
		victim: victim, victimOf: map[string]bool{}}
	dead := make(chan struct{})
	victimHandled := make(chan struct{}, 1)
	for i := range members {
		b := open(i == victim)
		_, err := b.Subscribe(context.Background(), topic, func(ctx context.Context, d *bus.Delivery) error {
			if i == victim {
				select {
				case <-dead:
					<-ctx.Done() // a dead process does nothing more
					return ctx.Err()
				default:
				}
			}
			log.add(i, d)
			if i == victim {
				select {
				case victimHandled <- struct{}{}:
				default:
				}
			}
			return nil
		}, bus.WithGroup(group), bus.WithKeyOrdering(), bus.WithAckTimeout(10*time.Second), bus.WithMaxInFlight(8))
		require.NoError(t, err, "member %d joins", i)
	}
	// Closed before the members (cleanups run last first): the dead
	// member's connections end, so that its Close returns at once.
	t.Cleanup(func() { _ = proxy.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, pub.Publish(ctx, topic, crashMessages(keys, 0, perKey/2)...))
	select {
	case <-victimHandled:
	case <-ctx.Done():
		t.Fatalf("the member to be killed handled nothing; %d handled by the others", log.count())
	}
	close(dead)
	proxy.Blackhole(true)
	log.crash()
	require.NoError(t, pub.Publish(ctx, topic, crashMessages(keys, perKey/2, perKey)...))
	for log.count() < keys*perKey {
		select {
		case <-ctx.Done():
			t.Fatalf("handled %d of %d messages after the crash", log.count(), keys*perKey)
		case <-time.After(20 * time.Millisecond):
		}
	}
	log.check(t, keys, perKey)
	log.mu.Lock()
	resumed, victimKeys := log.resumed, len(log.victimOf)
	log.mu.Unlock()
	t.Logf("ledger: %d keys × %d messages, %d members, 4 partitions, member %d killed mid-run (it had handled %d keys): its keys resumed on another member %v after the crash (session timeout %v); lost 0, no key out of order",
		keys, perKey, members, victim, victimKeys, resumed.Round(time.Millisecond), crashSession)
	assert.Positive(t, resumed, "another member handled a key of the dead member")
	assert.Less(t, resumed, 3*crashSession, "the dead member's partitions move within about the session timeout")
}
