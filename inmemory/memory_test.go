package inmemory

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/observer"
)

// newTestBackend returns a private backend closed when the test ends.
func newTestBackend(t *testing.T, opts *Options) *Backend {
	t.Helper()
	be, err := New(opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = be.Close() })
	return be
}

// subscribeGroup joins group on topic with an ack timeout of a minute; the
// subscription is closed when the test ends.
func subscribeGroup(t *testing.T, be *Backend, topic, group string) *Subscription {
	t.Helper()
	s, err := be.Subscribe(context.Background(), topic, backend.SubscribeConfig{Group: group, AckTimeout: time.Minute, Observer: observer.Nop()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s.(*Subscription)
}

// ackAll acks every message of ms on s. The external tests use it too
// (export_test.go).
func ackAll(t testing.TB, s backend.Subscription, ms []*backend.Message) {
	t.Helper()
	ids := make([]backend.AckID, len(ms))
	for i, m := range ms {
		ids[i] = m.AckID
	}
	require.NoError(t, s.Ack(context.Background(), ids), "ack %d", len(ms))
}

func TestSettledEntriesDropTheirMessageData(t *testing.T) {
	be := newTestBackend(t, nil)
	ctx := context.Background()
	a, b := subscribeGroup(t, be, "mem", "a"), subscribeGroup(t, be, "mem", "b")
	require.NoError(t, be.Publish(ctx, "mem", []*backend.Message{{ID: "x", Headers: map[string]string{"k": "v"}, Payload: []byte("data")}}))
	tp := be.br.lookup("mem")
	tp.lock()
	e := tp.at(0)
	tp.unlock()
	require.NotNil(t, e)

	settle := func(s *Subscription) {
		m, err := s.Receive(ctx, 1)
		require.NoError(t, err)
		require.Len(t, m, 1)
		require.NoError(t, s.Ack(ctx, []backend.AckID{m[0].AckID}))
	}
	settle(a)
	tp.lock()
	assert.NotNil(t, e.payload, "group b still owes the entry")
	tp.unlock()
	settle(b)
	tp.lock()
	assert.Nil(t, e.payload, "payload released")
	assert.Nil(t, e.meta, "key and headers released")
	assert.Empty(t, e.id, "id released")
	assert.Nil(t, tp.at(0), "ring slot cleared")
	for _, g := range tp.glist {
		for _, q := range g.queues {
			assert.Zero(t, q.recs.len(), "settled leases leave the lease queue")
		}
	}
	tp.unlock()
	require.NoError(t, a.Close())
	require.NoError(t, b.Close())
}

func TestRingShrinksAfterASpike(t *testing.T) {
	be := newTestBackend(t, nil)
	ctx := context.Background()
	s := subscribeGroup(t, be, "spike", "g")
	batch := make([]*backend.Message, 1000)
	for i := range batch {
		batch[i] = &backend.Message{ID: "m", Payload: make([]byte, 100)}
	}
	for round := range 10 {
		for i := range batch {
			batch[i].ID = fmt.Sprintf("m%d-%d", round, i)
		}
		require.NoError(t, be.Publish(ctx, "spike", batch))
	}
	tp := be.br.lookup("spike")
	tp.lock()
	peak := len(tp.ring)
	tp.unlock()
	require.GreaterOrEqual(t, peak, 10000)
	for n := 0; n < 10000; {
		m, err := s.Receive(ctx, 512)
		require.NoError(t, err)
		ackAll(t, s, m)
		n += len(m)
	}
	tp.lock()
	defer tp.unlock()
	assert.LessOrEqual(t, len(tp.ring), keptRing, "ring shrinks back once drained")
	assert.LessOrEqual(t, len(tp.glist[0].queues[0].recs.buf), 1024, "lease queue shrinks back once drained")
}
