package redisstream_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/testkit/redistest"
	"github.com/eventbus-go/bus/observer"
	"github.com/eventbus-go/bus/redisstream"
)

var topicSeq atomic.Int64

// uniqueTopic returns a topic no other test (or run against a shared
// server) uses. On a shared server ($BUS_REDIS_URL) its keys are deleted
// when the test ends; private servers vanish with their test.
func uniqueTopic(t testing.TB) string {
	topic := fmt.Sprintf("rs-test.%s.%d.%d", strings.NewReplacer("/", "-", " ", "-").Replace(t.Name()), time.Now().UnixNano(), topicSeq.Add(1))
	if u := os.Getenv(redistest.EnvURL); u != "" {
		t.Cleanup(func() {
			opts, err := redis.ParseURL(u)
			if err != nil {
				return
			}
			c := redis.NewClient(opts)
			defer c.Close()
			stream := "bus:{" + topic + "}"
			c.Del(context.Background(), stream, stream+"#hold", stream+"#held", stream+".dlq", stream+".dlq#hold", stream+".dlq#held")
		})
	}
	return topic
}

// recorder is an observer that keeps every event.
type recorder struct {
	mu     sync.Mutex
	events []observer.Event
}

func (r *recorder) Observe(_ context.Context, e observer.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func (r *recorder) count(scope observer.Scope, contains string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.events {
		if e.Scope == scope && (contains == "" || (e.Err != nil && strings.Contains(e.Err.Error(), contains))) {
			n++
		}
	}
	return n
}

// openBus returns a bus over a backend on url, closed when the test ends.
func openBus(t testing.TB, url string, opts *redisstream.Options, busOpts ...bus.Option) (*bus.Bus, *redisstream.Backend, redis.UniversalClient) {
	t.Helper()
	ro, err := redis.ParseURL(url)
	require.NoError(t, err, "parse url")
	client := redis.NewClient(ro)
	be := newBackend(t, client, opts)
	b := bus.New(be, busOpts...)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = b.Close(ctx)
	})
	return b, be, client
}

// ledger counts what a fault test saw of each message.
type ledger struct {
	mu        sync.Mutex
	published map[string]bool
	delivered map[string]int
	acked     map[string]bool
	deadLet   map[string]bool
}

func newLedger() *ledger {
	return &ledger{published: map[string]bool{}, delivered: map[string]int{}, acked: map[string]bool{}, deadLet: map[string]bool{}}
}

func (l *ledger) publish(id string) { l.mu.Lock(); l.published[id] = true; l.mu.Unlock() }
func (l *ledger) deliver(id string) { l.mu.Lock(); l.delivered[id]++; l.mu.Unlock() }
func (l *ledger) ack(id string)     { l.mu.Lock(); l.acked[id] = true; l.mu.Unlock() }

// missing returns how many published messages were never acked.
func (l *ledger) missing() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for id := range l.published {
		if !l.acked[id] && !l.deadLet[id] {
			n++
		}
	}
	return n
}

// report logs the ledger and returns the lost count.
func (l *ledger) report(t testing.TB) (lost int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	delivered, dup := 0, 0
	for _, n := range l.delivered {
		delivered += n
		if n > 1 {
			dup += n - 1
		}
	}
	for id := range l.published {
		if !l.acked[id] && !l.deadLet[id] {
			lost++
		}
	}
	t.Logf("ledger: published=%d delivered=%d (unique %d) acked=%d dead-lettered=%d duplicate=%d lost=%d",
		len(l.published), delivered, len(l.delivered), len(l.acked), len(l.deadLet), dup, lost)
	return lost
}
