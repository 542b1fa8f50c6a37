package redisstream_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/redistest"
	"github.com/eventbus-go/bus/observer"
	"github.com/eventbus-go/bus/redisstream"
)

// spiEnv drives the backend through the SPI directly, without the bus.
type spiEnv struct {
	t      *testing.T
	be     *redisstream.Backend
	client redis.UniversalClient
	topic  string
}

func newSPIEnv(t *testing.T) *spiEnv {
	opts, err := redis.ParseURL(redistest.URL(t))
	require.NoError(t, err)
	client := redis.NewClient(opts)
	be := newBackend(t, client, nil)
	t.Cleanup(func() { _ = be.Close() })
	return &spiEnv{t: t, be: be, client: client, topic: uniqueTopic(t)}
}

func (e *spiEnv) subscribe(ackTimeout time.Duration) backend.Subscription {
	e.t.Helper()
	s, err := e.be.Subscribe(context.Background(), e.topic, backend.SubscribeConfig{
		Group: "g", StartFrom: backend.StartOldest, AckTimeout: ackTimeout, MaxInFlight: 10,
		MaxDeliveries: 10, Observer: observer.Nop,
	})
	require.NoError(e.t, err)
	e.t.Cleanup(func() { _ = s.Close() })
	return s
}

func (e *spiEnv) publish(ids ...string) {
	e.t.Helper()
	msgs := make([]*backend.Message, len(ids))
	for i, id := range ids {
		msgs[i] = &backend.Message{ID: id, Payload: []byte("x"), PublishedAt: time.Now()}
	}
	require.NoError(e.t, e.be.Publish(context.Background(), e.topic, msgs))
}

// receive waits until n messages arrived.
func (e *spiEnv) receive(s backend.Subscription, n int) []*backend.Message {
	e.t.Helper()
	var got []*backend.Message
	deadline := time.Now().Add(10 * time.Second)
	for len(got) < n {
		require.True(e.t, time.Now().Before(deadline), "received %d of %d", len(got), n)
		msgs, err := s.Receive(context.Background(), n-len(got))
		require.NoError(e.t, err)
		got = append(got, msgs...)
	}
	return got
}

func TestReceiveReturnsPromptlyWhenCtxIsCancelled(t *testing.T) {
	e := newSPIEnv(t)
	s := e.subscribe(time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := s.Receive(ctx, 10)
		done <- err
	}()
	time.AfterFunc(50*time.Millisecond, cancel)
	select {
	case err := <-done:
		// An expired BLOCK would return no entries and a nil error; the
		// cancellation error shows the read was unblocked by the cancel.
		require.ErrorIs(t, err, context.Canceled, "a cancelled ctx unblocks the read")
	case <-time.After(5 * time.Second):
		t.Fatal("Receive did not return after its ctx was cancelled")
	}
	// The subscription still works afterwards.
	e.publish("after")
	got := e.receive(s, 1)
	assert.Equal(t, "after", got[0].ID)
}

func TestReceiveNeverReturnsMoreThanMax(t *testing.T) {
	e := newSPIEnv(t)
	s := e.subscribe(time.Minute)
	e.publish("a", "b", "c", "d", "e")
	msgs, err := s.Receive(context.Background(), 2)
	require.NoError(t, err)
	require.Len(t, msgs, 2, "COUNT is exactly the capacity asked for")
	p, err := e.client.XPending(context.Background(), "bus:{"+e.topic+"}", "g").Result()
	require.NoError(t, err)
	assert.EqualValues(t, 2, p.Count, "nothing beyond max was taken from the stream")
}

func TestSettlementAfterLeaseMovedOn(t *testing.T) {
	e := newSPIEnv(t)
	const ackTimeout = 100 * time.Millisecond
	first := e.subscribe(ackTimeout)
	second := e.subscribe(ackTimeout)
	e.publish("m")
	m := e.receive(first, 1)[0]
	require.Equal(t, 1, m.Attempt)

	// The lease runs out and the second member takes the entry.
	m2 := e.receive(second, 1)[0]
	require.Equal(t, "m", m2.ID)
	require.Equal(t, 2, m2.Attempt, "the reclaimed delivery counts a second attempt")

	ext := first.(backend.Extender)
	require.Error(t, ext.Extend(context.Background(), m.AckID), "extending a lease another member took fails")
	require.ErrorIs(t, first.Nack(context.Background(), m.AckID, 0), backend.ErrStale, "a stale nack changes nothing and says so")
	require.NoError(t, second.(backend.Extender).Extend(context.Background(), m2.AckID), "the owner may extend")

	// The stale nack did not make the entry claimable: no third delivery.
	msgs, err := first.Receive(context.Background(), 1)
	require.NoError(t, err)
	assert.Empty(t, msgs, "the entry stays with its owner")

	require.NoError(t, second.Ack(context.Background(), []backend.AckID{m2.AckID}))
	require.NoError(t, second.Ack(context.Background(), []backend.AckID{m2.AckID}), "ack is idempotent")
	require.Error(t, second.(backend.Extender).Extend(context.Background(), m2.AckID), "an acked entry cannot be extended")
}

func TestPublishAndCloseAfterBackendClose(t *testing.T) {
	e := newSPIEnv(t)
	require.NoError(t, e.be.Close())
	err := e.be.Publish(context.Background(), e.topic, []*backend.Message{{ID: "x", Payload: []byte("x")}})
	require.ErrorIs(t, err, backend.ErrClosed)
	require.ErrorIs(t, e.be.Close(), backend.ErrClosed, "closing twice reports ErrClosed")
}
