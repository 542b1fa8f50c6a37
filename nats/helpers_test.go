package nats_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	busnats "github.com/eventbus-go/bus/nats"
	"github.com/eventbus-go/bus/observer"
)

// isolatedRun and isolatedSeq make the IDs isolated hands out: random
// per process, and counted within it, so no two of one process are alike
// (the lower-cased tail of a NUID, used before, repeated within a few
// hundred IDs in one process in twenty).
var (
	isolatedRun = func() string {
		var b [3]byte
		_, _ = rand.Read(b[:])
		return hex.EncodeToString(b[:])
	}()
	isolatedSeq atomic.Uint32
)

// isolated returns Options whose subjects and streams no other test run
// uses, and deletes the streams they created when the test ends, so tests
// may share a server (BUS_NATS_URL) without seeing each other.
func isolated(t testing.TB, url string, base busnats.Options) busnats.Options {
	t.Helper()
	id := fmt.Sprintf("%s%04x", isolatedRun, isolatedSeq.Add(1)&0xffff)
	base.SubjectPrefix = "bt" + id
	base.StreamPrefix = "BT" + id
	base.StreamName = "BT" + id
	t.Cleanup(func() { deleteStreams(t, url, "BT"+id) })
	return base
}

func deleteStreams(t testing.TB, url, prefix string) {
	nc, err := natsgo.Connect(url)
	if err != nil {
		t.Logf("cleanup: connect: %v", err)
		return
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Logf("cleanup: %v", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	names := js.StreamNames(ctx)
	var del []string
	for n := range names.Name() {
		// The backend's key-value buckets (locks, releases, partitions)
		// are streams too, named KV_<prefix>...
		if strings.HasPrefix(n, prefix) || strings.HasPrefix(n, "KV_"+prefix) {
			del = append(del, n)
		}
	}
	for _, n := range del {
		if err := js.DeleteStream(ctx, n); err != nil {
			t.Logf("cleanup: delete stream %s: %v", n, err)
		}
	}
}

// connect opens a backend that owns its connection.
func connect(t testing.TB, url string, o busnats.Options) *busnats.Backend {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	be, err := busnats.Connect(ctx, url, &o)
	require.NoError(t, err, "connect to %s", url)
	return be
}

// eventCounter is an observer that counts events by scope.
type eventCounter struct {
	mu sync.Mutex
	n  map[observer.Scope]int
}

func (e *eventCounter) Observe(_ context.Context, ev observer.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.n == nil {
		e.n = map[observer.Scope]int{}
	}
	e.n[ev.Scope]++
}

func (e *eventCounter) count(s observer.Scope) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n[s]
}
