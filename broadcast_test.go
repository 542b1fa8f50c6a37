package bus_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/inmemory"
	"github.com/eventbus-go/bus/internal/testkit/crashtest"
	"github.com/eventbus-go/bus/observer"
)

// sharedMem is a mem backend that closing a bus over it leaves open, so
// several buses, one a process that dies, share one broker.
type sharedMem struct{ *inmemory.Backend }

func (sharedMem) Close() error { return nil }

// A dead process's broadcast group whose lease lapsed is deleted by the
// next broadcast Subscribe to the topic, at once, though no broadcast
// subscription of the topic ran meanwhile: the new one's own expiry (an
// hour) puts its next sweep far past the test.
func TestBroadcastSubscribeSweepsLapsedGroups(t *testing.T) {
	ctx := context.Background()
	be, err := inmemory.New(nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = be.Close() })
	const topic = "cache.invalidate"
	nop := func(context.Context, *bus.Delivery) error { return nil }

	member := crashtest.New(sharedMem{be})
	dying := bus.New(member, bus.WithObserver(observer.Nop()))
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_ = dying.Close(cctx)
	})
	dead, err := dying.Subscribe(ctx, topic, nop, bus.WithBroadcast(), bus.WithBroadcastExpiry(time.Second))
	require.NoError(t, err)
	member.Crash()

	// The lease has lapsed once another holder can take it.
	require.Eventually(t, func() bool {
		held, _, err := be.LockGroup(ctx, topic, dead.Group(), "probe", time.Second)
		require.NoError(t, err)
		if held {
			require.NoError(t, be.UnlockGroup(ctx, topic, dead.Group(), "probe"))
		}
		return held
	}, 10*time.Second, 20*time.Millisecond, "the dead subscription's lease lapses after its expiry")

	live := bus.New(sharedMem{be}, bus.WithObserver(observer.Nop()))
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		require.NoError(t, live.Close(cctx))
	})
	sub, err := live.Subscribe(ctx, topic, nop, bus.WithBroadcast(), bus.WithBroadcastExpiry(time.Hour))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		groups, err := live.Groups(ctx, topic)
		require.NoError(t, err)
		names := make([]string, len(groups))
		for i, g := range groups {
			names[i] = g.Name
		}
		return !slices.Contains(names, dead.Group()) && slices.Contains(names, sub.Group())
	}, 5*time.Second, 20*time.Millisecond, "the new broadcast subscription deletes the lapsed group when it starts")
}

// noBroadcast is a mem backend that declares no Broadcast, saying what
// it would need.
type noBroadcast struct {
	*inmemory.Backend
	needs string
}

func (n noBroadcast) Capabilities() backend.Capabilities {
	c := n.Backend.Capabilities()
	c.Broadcast, c.BroadcastNeeds = false, n.needs
	return c
}

// WithBroadcast on a backend without Capabilities.Broadcast is refused
// with ErrUnsupported, and the error carries what the backend says it
// needs for it (Capabilities.BroadcastNeeds), where it says so.
func TestBroadcastRefusalSaysWhatTheBackendNeeds(t *testing.T) {
	ctx := context.Background()
	nop := func(context.Context, *bus.Delivery) error { return nil }
	for _, needs := range []string{"", "the thing; set the thing parameter"} {
		be, err := inmemory.New(nil)
		require.NoError(t, err)
		b := bus.New(noBroadcast{be, needs}, bus.WithObserver(observer.Nop()))
		_, err = b.Subscribe(ctx, "t", nop, bus.WithBroadcast())
		require.ErrorIs(t, err, bus.ErrUnsupported)
		if needs == "" {
			require.NotContains(t, err.Error(), "it needs")
		} else {
			require.Contains(t, err.Error(), "it needs "+needs)
		}
		require.NoError(t, b.Close(ctx))
	}
}
