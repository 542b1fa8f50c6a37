package inbox_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/inbox"
	"github.com/eventbus-go/bus/inmemory"
	"github.com/eventbus-go/bus/internal/testkit/crashtest"
	"github.com/eventbus-go/bus/internal/testkit/natstest"
	"github.com/eventbus-go/bus/internal/testkit/pgtest"
	"github.com/eventbus-go/bus/internal/testkit/redistest"
	"github.com/eventbus-go/bus/observer"

	_ "github.com/eventbus-go/bus/nats"        // nats://
	_ "github.com/eventbus-go/bus/postgres"    // postgres://
	_ "github.com/eventbus-go/bus/redisstream" // redis://
)

// The kill test: a consumer commits the inbox transactions of its first
// messages and is killed before it acks them; a second consumer of the
// same group then gets them again. Every message's effect must be applied
// exactly once, and every message acked.
const (
	killMessages   = 24
	killInFlight   = 4
	killGroup      = "effects"
	killAckTimeout = time.Second
)

// durable lists the durable backends, each by a function that starts a
// private server for the test and returns the bus URL. A consumer on them
// runs in a child process that is SIGKILLed.
// A backend that registers its URL scheme is added with one line here
// and its blank import above.
var durable = []struct {
	name string
	url  func(t *testing.T) string
}{
	{"redis", func(t *testing.T) string { return redistest.Start(t).URL() }},
	{"nats", func(t *testing.T) string { return natstest.Start(t).URL() }},
	{"postgres", func(t *testing.T) string { return pgtest.Start(t).URL() }},
}

// consumerOptions are the options of every consumer of the test, the
// killed one and the one that takes over.
func consumerOptions() []bus.SubscribeOption {
	return []bus.SubscribeOption{
		bus.WithGroup(killGroup), bus.WithAckTimeout(killAckTimeout), bus.WithMaxInFlight(killInFlight),
		bus.WithStartFrom(bus.StartOldest),
	}
}

func TestEffectAppliedOnceThroughKillBetweenCommitAndAck(t *testing.T) {
	t.Parallel()
	watchdog(t, 100*time.Second)
	srv := pgtest.Start(t)

	for _, be := range durable {
		t.Run(be.name, func(t *testing.T) {
			db := newDatabase(t, srv, schemaName())
			url := be.url(t)
			b := openBus(t, url)
			topic := publish(t, b)
			committed := killChild(t, url, db.url, topic)
			takeOver(t, b, db, topic, committed)
		})
	}

	// mem lives in the process, so no process can be killed: the
	// consumer is a crashtest member that crashes after its commits, so
	// that its acks never reach the backend, as a killed process's.
	t.Run("mem", func(t *testing.T) {
		db := newDatabase(t, srv, schemaName())
		shared, err := inmemory.New(nil)
		require.NoError(t, err)
		t.Cleanup(func() { _ = shared.Close() })
		b := bus.New(crashtest.New(shared), bus.WithObserver(observer.Nop()))
		t.Cleanup(func() { closeBus(t, b) })
		topic := publish(t, b)
		committed := crashMember(t, shared, db, topic)
		takeOver(t, b, db, topic, committed)
	})
}

func openBus(t *testing.T, url string) *bus.Bus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := bus.Open(ctx, url, bus.WithObserver(observer.Nop()))
	require.NoError(t, err)
	t.Cleanup(func() { closeBus(t, b) })
	return b
}

func closeBus(t *testing.T, b *bus.Bus) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	assert.NoError(t, b.Close(ctx), "close the bus")
}

// publish publishes the test's messages to a new topic.
func publish(t *testing.T, b *bus.Bus) string {
	t.Helper()
	topic := "kill." + schemaName()
	msgs := make([]*bus.Message, killMessages)
	for i := range msgs {
		msgs[i] = &bus.Message{ID: fmt.Sprintf("m-%02d", i), Payload: []byte("effect")}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, b.Publish(ctx, topic, msgs...))
	return topic
}

// committedThenStuck wraps an inbox handler: once it committed, it tells
// committed and then never returns, so the delivery is never acked.
func committedThenStuck(h bus.Handler, committed func(id string)) bus.Handler {
	return func(ctx context.Context, d *bus.Delivery) error {
		if err := h(ctx, d); err != nil {
			return err
		}
		committed(d.ID)
		<-ctx.Done()
		return ctx.Err()
	}
}

// Environment of the child consumer.
const (
	childEnv      = "INBOX_TEST_CHILD"
	childBusEnv   = "INBOX_TEST_BUS_URL"
	childDBEnv    = "INBOX_TEST_DB_URL"
	childTopicEnv = "INBOX_TEST_TOPIC"
)

// runChild consumes the topic through the inbox, printing "COMMITTED
// <id>" when a message's transaction committed, and blocking before the
// ack until the parent kills the process.
func runChild() {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv(childDBEnv))
	if err != nil {
		fail(err)
	}
	in, err := inbox.New(pool)
	if err != nil {
		fail(err)
	}
	b, err := bus.Open(ctx, os.Getenv(childBusEnv), bus.WithObserver(observer.Nop()))
	if err != nil {
		fail(err)
	}
	var mu sync.Mutex
	h := committedThenStuck(in.Handle(effect), func(id string) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(os.Stdout, "COMMITTED %s\n", id)
	})
	if _, err := b.Subscribe(ctx, os.Getenv(childTopicEnv), h, consumerOptions()...); err != nil {
		fail(err)
	}
	select {} // until SIGKILL
}

// killChild runs a consumer in a child process, waits until it committed
// as many messages as it may have in flight, SIGKILLs it, and returns the
// IDs it committed.
func killChild(t *testing.T, busURL, dbURL, topic string) map[string]bool {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1", childBusEnv+"="+busURL, childDBEnv+"="+dbURL, childTopicEnv+"="+topic)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	killed := false
	t.Cleanup(func() {
		if !killed {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})

	committed := map[string]bool{}
	all := make(chan struct{})
	lines := make(chan struct{})
	var mu sync.Mutex
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) == 2 && f[0] == "COMMITTED" {
				mu.Lock()
				committed[f[1]] = true
				if len(committed) == killInFlight {
					close(all)
				}
				mu.Unlock()
			}
		}
	}()
	select {
	case <-all:
	case <-time.After(30 * time.Second):
		t.Fatalf("the child consumer did not commit %d messages within 30s", killInFlight)
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL), "SIGKILL the child between commit and ack")
	_ = cmd.Wait()
	killed = true
	<-lines
	mu.Lock()
	defer mu.Unlock()
	return committed
}

// crashMember consumes the topic through the inbox on a crashtest member
// of shared, crashes the member once it committed as many messages as it
// may have in flight, and returns the IDs it committed.
func crashMember(t *testing.T, shared *inmemory.Backend, db *database, topic string) map[string]bool {
	t.Helper()
	member := crashtest.New(shared)
	b := bus.New(member, bus.WithObserver(observer.Nop()))
	in, err := inbox.New(db.pool)
	require.NoError(t, err)
	var mu sync.Mutex
	committed := map[string]bool{}
	all := make(chan struct{})
	h := committedThenStuck(in.Handle(effect), func(id string) {
		mu.Lock()
		defer mu.Unlock()
		committed[id] = true
		if len(committed) == killInFlight {
			close(all)
		}
	})
	_, err = b.Subscribe(context.Background(), topic, h, consumerOptions()...)
	require.NoError(t, err)
	select {
	case <-all:
	case <-time.After(30 * time.Second):
		t.Fatalf("the consumer did not commit %d messages within 30s", killInFlight)
	}
	member.Crash()
	// The stuck handlers end with Close; what they would settle fails.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_ = b.Close(ctx)
	mu.Lock()
	defer mu.Unlock()
	return committed
}

// takeOver consumes the topic through the inbox on b until every message
// was acked, and checks that each message's effect was applied once, that
// the messages the killed consumer committed came back and were acked
// without running the handler.
func takeOver(t *testing.T, b *bus.Bus, db *database, topic string, committed map[string]bool) {
	t.Helper()
	require.Len(t, committed, killInFlight, "the killed consumer committed its in-flight messages")
	in, err := inbox.New(db.pool)
	require.NoError(t, err)
	var mu sync.Mutex
	delivered, ran := map[string]int{}, map[string]int{}
	h := in.Handle(func(ctx context.Context, tx pgx.Tx, d *bus.Delivery) error {
		mu.Lock()
		ran[d.ID]++
		mu.Unlock()
		return effect(ctx, tx, d)
	})
	ctx, cancel := context.WithCancel(context.Background())
	sub, err := b.Subscribe(ctx, topic, func(ctx context.Context, d *bus.Delivery) error {
		mu.Lock()
		delivered[d.ID]++
		mu.Unlock()
		return h(ctx, d)
	}, consumerOptions()...)
	require.NoError(t, err)
	defer func() {
		cancel()
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer ccancel()
		assert.NoError(t, sub.Close(cctx), "close the subscription")
	}()

	require.Eventually(t, func() bool {
		gctx, gcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer gcancel()
		gs, err := b.Groups(gctx, topic)
		if err != nil {
			return false
		}
		for _, g := range gs {
			if g.Name == killGroup {
				effects, err := db.readEffects()
				return err == nil && g.Pending == 0 && g.Lag == 0 && len(effects) == killMessages
			}
		}
		return false
	}, 30*time.Second, 20*time.Millisecond, "the new consumer handles and acks every message")

	mu.Lock()
	defer mu.Unlock()
	for id, n := range db.effects(t) {
		assert.Equal(t, 1, n, "message %s: the effect is applied exactly once", id)
	}
	for id := range committed {
		assert.Positive(t, delivered[id], "message %s, committed before the kill, is delivered again", id)
		assert.Zero(t, ran[id], "message %s, committed before the kill, does not run again", id)
	}
	assert.Len(t, ran, killMessages-len(committed), "the new consumer runs the handler of every other message")
	assert.Equal(t, killMessages, db.count(t, "SELECT count(*) FROM bus_inbox WHERE topic = $1 AND group_name = $2", topic, killGroup),
		"every message is recorded as processed by the group")
}
