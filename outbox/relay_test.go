package outbox_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/testkit/redistest"
	"github.com/eventbus-go/bus/observer"
	"github.com/eventbus-go/bus/outbox"
	_ "github.com/eventbus-go/bus/redisstream" // redis://
)

// crashingPublisher publishes, and on its nth call then hangs until its
// ctx ends, as a relay process killed between Publish and the delete.
type crashingPublisher struct {
	bus.Publisher
	nth     int32
	calls   atomic.Int32
	crashed chan struct{}
}

func (p *crashingPublisher) Publish(ctx context.Context, topic string, msgs ...*bus.Message) error {
	err := p.Publisher.Publish(ctx, topic, msgs...)
	if p.calls.Add(1) == p.nth {
		close(p.crashed)
		<-ctx.Done()
		return ctx.Err()
	}
	return err
}

// gate holds one Publish call until released.
type gate struct{ reached, release chan struct{} }

func newGate() *gate { return &gate{reached: make(chan struct{}), release: make(chan struct{})} }

// gatedPublisher holds its nth call at gates[n] before publishing.
type gatedPublisher struct {
	bus.Publisher
	gates map[int32]*gate // read only once the relay runs
	calls atomic.Int32
}

func (p *gatedPublisher) Publish(ctx context.Context, topic string, msgs ...*bus.Message) error {
	if g := p.gates[p.calls.Add(1)]; g != nil {
		close(g.reached)
		select {
		case <-g.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return p.Publisher.Publish(ctx, topic, msgs...)
}

// pendingAt counts the waiting rows on a new connection (-1 while the
// server is down).
func pendingAt(url string) int64 {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return -1
	}
	defer conn.Close(ctx)
	st, err := outbox.ReadStats(ctx, conn)
	if err != nil {
		return -1
	}
	return st.Pending
}

// drain publishes a last message straight to topic and waits until c has
// handled it: with one message in flight, everything stored before it has
// been handled too.
func drain(t *testing.T, b *bus.Bus, c *collector, topic string) {
	t.Helper()
	require.NoError(t, b.Publish(context.Background(), topic, &bus.Message{ID: "last", Key: "last"}))
	require.Eventually(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.ids["last"] > 0
	}, 20*time.Second, 10*time.Millisecond, "the subscription reaches the end of the topic")
	c.mu.Lock()
	delete(c.ids, "last")
	delete(c.byKey, "last")
	c.mu.Unlock()
}

func TestRelayKilledMidBatchThenDatabaseAndBrokerRestartsLoseNothing(t *testing.T) {
	defer watchdog(t, 2*time.Minute)()
	ctx := context.Background()
	redisSrv := redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always")
	pg, conn := startDB(t)
	b, err := bus.Open(ctx, redisSrv.URL(), bus.WithObserver(observer.Nop()))
	require.NoError(t, err)
	defer b.Close(ctx)
	var want []*bus.Message
	for range 10 {
		want = append(want, write(t, conn, "orders", false, keyed(100, 8, "w")...)...)
	}

	// The first relay dies between a Publish and its delete.
	crash := &crashingPublisher{Publisher: b, nth: 3, crashed: make(chan struct{})}
	r1, err := outbox.NewRelay(pg.URL(), crash, outbox.WithBatchSize(50), outbox.WithObserver(observer.Nop()))
	require.NoError(t, err)
	<-crash.crashed
	closeRelay(t, r1)
	require.Greater(t, pendingAt(pg.URL()), int64(len(want)-150), "the killed relay deleted at most its first batches")
	pg.Restart()
	redisSrv.Restart()

	// The second relay lives through a broker restart, then a database
	// restart, each while it holds a batch: its 4th Publish goes to a
	// dead broker, and the delete after its 8th to a dead database.
	failed := make(chan struct{}, 1)
	obs := observer.Func(func(_ context.Context, e observer.Event) {
		if e.Scope == observer.ScopePublish && e.Err != nil {
			select {
			case failed <- struct{}{}:
			default:
			}
		}
	})
	gated := &gatedPublisher{Publisher: b, gates: map[int32]*gate{4: newGate(), 8: newGate()}}
	r2, err := outbox.NewRelay(pg.URL(), gated, outbox.WithBatchSize(50), outbox.WithPollInterval(50*time.Millisecond), outbox.WithObserver(obs))
	require.NoError(t, err)
	defer closeRelay(t, r2)
	<-gated.gates[4].reached
	redisSrv.Kill()
	close(gated.gates[4].release)
	select {
	case <-failed:
	case <-time.After(20 * time.Second):
		t.Fatal("the relay reports the failed publish while the broker is down")
	}
	redisSrv.Restart()
	<-gated.gates[8].reached
	pg.Kill()
	close(gated.gates[8].release)
	pg.Restart()
	require.Eventually(t, func() bool { return pendingAt(pg.URL()) == 0 }, 20*time.Second, 10*time.Millisecond,
		"the relay reconnects and publishes every row")

	c := collect(t, b, "orders")
	drain(t, b, c, "orders")
	c.requireExactly(t, want)
}

// recordingPublisher notes which relay published each ID.
type recordingPublisher struct {
	bus.Publisher
	relay int
	mu    *sync.Mutex
	by    map[string][]int // relays that published the ID
}

func (p *recordingPublisher) Publish(ctx context.Context, topic string, msgs ...*bus.Message) error {
	err := p.Publisher.Publish(ctx, topic, msgs...)
	if err == nil {
		p.mu.Lock()
		for _, m := range msgs {
			p.by[m.ID] = append(p.by[m.ID], p.relay)
		}
		p.mu.Unlock()
	}
	return err
}

func TestTwoRelaysShareThePartitionsWithoutDuplicatesOrLoss(t *testing.T) {
	defer watchdog(t, 2*time.Minute)()
	pg, conn := startDB(t)
	b := memBus(t)
	var mu sync.Mutex
	by := map[string][]int{}
	for i := range 2 {
		pub := &recordingPublisher{Publisher: b, relay: i, mu: &mu, by: by}
		r, err := outbox.NewRelay(pg.URL(), pub, outbox.WithBatchSize(20), outbox.WithPollInterval(20*time.Millisecond),
			outbox.WithObserver(observer.Nop()))
		require.NoError(t, err)
		defer closeRelay(t, r)
	}
	published := func(relay int) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, rs := range by {
			if rs[0] == relay {
				n++
			}
		}
		return n
	}
	var want []*bus.Message
	deadline := time.Now().Add(20 * time.Second)
	for len(want) < 400 || published(0) == 0 || published(1) == 0 {
		require.True(t, time.Now().Before(deadline), "both relays publish while rows keep coming")
		want = append(want, write(t, conn, "orders", false, keyed(20, 10, "w")...)...)
	}
	require.Eventually(t, func() bool { return pending(t, conn) == 0 }, 20*time.Second, 10*time.Millisecond)
	c := collect(t, b, "orders")
	drain(t, b, c, "orders")
	c.requireExactly(t, want)
	mu.Lock()
	defer mu.Unlock()
	for id, rs := range by {
		assert.Len(t, rs, 1, "message %s is published by one relay, once (by %v)", id, rs)
	}
}
