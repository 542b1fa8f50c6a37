package bus_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/observer"
)

var errFlaky = errors.New("flaky receive")

// flakyBackend is a fakeBackend whose Receives fail while failing is set.
type flakyBackend struct {
	*fakeBackend
	failing atomic.Bool
}

func (f *flakyBackend) Subscribe(ctx context.Context, topic string, cfg backend.SubscribeConfig) (backend.Subscription, error) {
	s, err := f.fakeBackend.Subscribe(ctx, topic, cfg)
	return flakySub{Subscription: s, failing: &f.failing}, err
}

type flakySub struct {
	backend.Subscription
	failing *atomic.Bool
}

func (s flakySub) Receive(ctx context.Context, max int) ([]*bus.BackendMessage, error) {
	if s.failing.Load() {
		return nil, errFlaky
	}
	return s.Subscription.Receive(ctx, max)
}

func TestHealthReportsFailingReceivesAndRecovery(t *testing.T) {
	be := &flakyBackend{fakeBackend: newFakeBackend()}
	be.failing.Store(true)
	b := bus.New(be, bus.WithObserver(observer.Nop()))
	t.Cleanup(func() { _ = b.Close(context.Background()) })
	sub, err := b.Subscribe(context.Background(), "t", func(context.Context, *bus.Delivery) error { return nil })
	require.NoError(t, err)

	require.Eventually(t, func() bool { return sub.Health().Failing >= 2 }, 10*time.Second, 5*time.Millisecond,
		"failed Receives are counted")
	h := sub.Health()
	assert.ErrorIs(t, h.LastError, errFlaky, "the last Receive error is reported")
	assert.False(t, h.LastErrorAt.IsZero(), "with when it failed")
	assert.True(t, h.LastReceive.IsZero(), "no Receive has succeeded yet")
	assert.True(t, h.Running, "a failing Receive does not end the subscription")

	be.failing.Store(false)
	require.Eventually(t, func() bool {
		h := sub.Health()
		return h.Failing == 0 && h.LastReceive.After(h.LastErrorAt)
	}, 10*time.Second, 5*time.Millisecond, "a Receive that succeeds resets Failing and sets LastReceive")
	assert.ErrorIs(t, sub.Health().LastError, errFlaky, "the last error stays reported after recovery")
}

func TestPingWithoutPingerIsUnsupported(t *testing.T) {
	b := bus.New(newFakeBackend())
	t.Cleanup(func() { _ = b.Close(context.Background()) })
	require.ErrorIs(t, b.Ping(context.Background()), bus.ErrUnsupported, "a backend without a Pinger cannot ping")
	require.ErrorIs(t, bus.New(nil).Ping(context.Background()), bus.ErrInvalidOption, "a bus without a backend cannot ping")
}
