package kafka_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/testkit/faultproxy"
	"github.com/eventbus-go/bus/internal/testkit/kafkatest"
	"github.com/eventbus-go/bus/internal/testkit/keyledger"
	"github.com/eventbus-go/bus/kafka"
	"github.com/eventbus-go/bus/observer"
)

// crashSession is the group session of testKeyOrderLedgerThroughACrash:
// the bound after which a dead member's partitions move.
const crashSession = 6 * time.Second

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
	log := keyledger.New()
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
			log.Add(i, d)
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
	require.NoError(t, pub.Publish(ctx, topic, keyledger.Messages(keys, 0, perKey/2)...))
	select {
	case <-victimHandled:
	case <-ctx.Done():
		t.Fatalf("the member to be killed handled nothing; %d handled by the others", log.Count())
	}
	close(dead)
	proxy.Blackhole(true)
	log.Crash(victim)
	require.NoError(t, pub.Publish(ctx, topic, keyledger.Messages(keys, perKey/2, perKey)...))
	for log.Count() < keys*perKey {
		select {
		case <-ctx.Done():
			t.Fatalf("handled %d of %d messages after the crash", log.Count(), keys*perKey)
		case <-time.After(20 * time.Millisecond):
		}
	}
	log.Check(t, keys, perKey)
	resumed, victimKeys := log.Resumed()
	t.Logf("ledger: %d keys × %d messages, %d members, 4 partitions, member %d killed mid-run (it had handled %d keys): its keys resumed on another member %v after the crash (session timeout %v); lost 0, no key out of order",
		keys, perKey, members, victim, victimKeys, resumed.Round(time.Millisecond), crashSession)
	assert.Positive(t, resumed, "another member handled a key of the dead member")
	assert.Less(t, resumed, 3*crashSession, "the dead member's partitions move within about the session timeout")
}
