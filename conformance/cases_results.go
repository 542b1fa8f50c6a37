package conformance

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	bus "github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
)

// StoreResult forwards to the backend's ResultStore, when it has one.
func (c *countingBackend) StoreResult(ctx context.Context, topic, id string, result []byte, ttl time.Duration) error {
	rs, ok := c.Backend.(backend.ResultStore)
	if !ok {
		return fmt.Errorf("conformance: %w: %s has no backend.ResultStore", bus.ErrUnsupported, c.Capabilities().Name)
	}
	return rs.StoreResult(ctx, topic, id, result, ttl)
}

// Result forwards to the backend's ResultStore, when it has one.
func (c *countingBackend) Result(ctx context.Context, topic, id string) ([]byte, bool, error) {
	rs, ok := c.Backend.(backend.ResultStore)
	if !ok {
		return nil, false, fmt.Errorf("conformance: %w: %s has no backend.ResultStore", bus.ErrUnsupported, c.Capabilities().Name)
	}
	return rs.Result(ctx, topic, id)
}

// testResultRoundTrip: a caller that asks for a message's result before
// the message is published gets, once it is handled, the bytes its
// handler set (the last of two SetResult calls), in AckOnSuccess and in
// AckManual; a result set is a copy of the handler's slice.
func testResultRoundTrip(t *testing.T, s *suite) {
	h := s.newHarness(t)
	for _, mode := range []bus.AckMode{bus.AckOnSuccess, bus.AckManual} {
		topic := h.topic("result")
		h.subscribe(context.Background(), topic, func(ctx context.Context, d *bus.Delivery) error {
			buf := []byte("draft")
			assert.NoError(t, d.SetResult(buf))
			buf = append(buf[:0], "done:"...)
			buf = append(buf, d.Payload...)
			assert.NoError(t, d.SetResult(buf))
			buf[0] = 'X' // the result is a copy
			if mode == bus.AckManual {
				return d.Ack(ctx)
			}
			return nil
		}, bus.WithAckMode(mode), bus.WithAckTimeout(s.longLease()))

		ctx, cancel := context.WithTimeout(context.Background(), s.deadline())
		got := make(chan []byte, 1)
		errc := make(chan error, 1)
		go func() {
			r, err := h.bus.Result(ctx, topic, "m-1")
			got <- r
			errc <- err
		}()
		h.publish(topic, &bus.Message{ID: "m-1", Payload: []byte("p1")})
		r := recv(t, s, got, "the result")
		require.NoError(t, <-errc, "%s: Result waits for the handled message", mode)
		require.Equal(t, "done:p1", string(r), "%s: the last result set, as it was set", mode)
		cancel()
	}
}

// testResultExpires: a result is gone once its ttl ran out; until then
// Result returns it at once.
func testResultExpires(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic := h.topic("resultttl")
	ttl := s.cfg.dur(time.Second)
	h.subscribe(context.Background(), topic, func(_ context.Context, d *bus.Delivery) error {
		return d.SetResult([]byte("r"))
	}, bus.WithResultTTL(ttl), bus.WithAckTimeout(s.longLease()))
	h.publish(topic, &bus.Message{ID: "m-ttl", Payload: []byte("x")})
	ctx, cancel := context.WithTimeout(context.Background(), s.deadline())
	defer cancel()
	r, err := h.bus.Result(ctx, topic, "m-ttl")
	require.NoError(t, err)
	require.Equal(t, "r", string(r))
	s.eventually(t, func() bool {
		short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_, err := h.bus.Result(short, topic, "m-ttl")
		return errors.Is(err, context.DeadlineExceeded)
	}, "the result is gone after its ttl")
}

// testResultOnlyWhenAcked: a handler that sets a result and fails stores
// none; its retry, which succeeds, stores its own.
func testResultOnlyWhenAcked(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic := h.topic("resultretry")
	h.subscribe(context.Background(), topic, func(_ context.Context, d *bus.Delivery) error {
		assert.NoError(t, d.SetResult(fmt.Appendf(nil, "attempt %d", d.Attempt)))
		if d.Attempt == 1 {
			return errors.New("first attempt fails")
		}
		return nil
	}, bus.WithAckTimeout(s.longLease()), fastRetry())
	h.publish(topic, &bus.Message{ID: "m-retry", Payload: []byte("x")})
	ctx, cancel := context.WithTimeout(context.Background(), s.deadline())
	defer cancel()
	r, err := h.bus.Result(ctx, topic, "m-retry")
	require.NoError(t, err)
	require.Equal(t, "attempt 2", string(r), "only the acked attempt's result is stored")
}

// testResultRefusals: a result ttl out of bounds, a result over
// MaxResultSize, a result set after the delivery was settled (by the
// handler, or in AckOnReceive before it ran), and, on a backend without
// Capabilities.Results, any result and any Result call are refused.
func testResultRefusals(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic := h.topic("resultbad")
	nop := func(context.Context, *bus.Delivery) error { return nil }
	_, err := h.bus.Subscribe(context.Background(), topic, nop, bus.WithResultTTL(time.Millisecond))
	require.ErrorIs(t, err, bus.ErrInvalidOption, "a result ttl under a second is refused")
	require.Zero(t, h.be.subscribes.Load(), "refused before any I/O")
	onReceive := make(chan error, 1)
	h.subscribe(context.Background(), topic, func(_ context.Context, d *bus.Delivery) error {
		trySend(onReceive, d.SetResult([]byte("r")))
		return nil
	}, bus.WithGroup(h.group("onreceive")), bus.WithAckMode(bus.AckOnReceive))
	errs := make(chan error, 4)
	h.subscribe(context.Background(), topic, func(ctx context.Context, d *bus.Delivery) error {
		trySend(errs, d.SetResult(make([]byte, bus.MaxResultSize+1)))
		trySend(errs, d.SetResult([]byte("ok")))
		assert.NoError(t, d.Ack(ctx))
		trySend(errs, d.SetResult([]byte("late")))
		return nil
	}, bus.WithAckMode(bus.AckManual), bus.WithAckTimeout(s.longLease()))
	h.publish(topic, &bus.Message{Payload: []byte("x")})
	oversized, first, late := recv(t, s, errs, "oversized"), recv(t, s, errs, "first"), recv(t, s, errs, "late")
	received := recv(t, s, onReceive, "the AckOnReceive handler's SetResult")
	ctx, cancel := context.WithTimeout(context.Background(), s.deadline())
	defer cancel()
	if !s.caps.Results {
		require.ErrorIs(t, first, bus.ErrUnsupported, "a backend without results refuses SetResult")
		require.ErrorIs(t, received, bus.ErrUnsupported, "a backend without results refuses SetResult in AckOnReceive too")
		_, err := h.bus.Result(ctx, topic, "any")
		require.ErrorIs(t, err, bus.ErrUnsupported, "a backend without results refuses Result")
		return
	}
	require.ErrorIs(t, oversized, bus.ErrPayloadTooLarge, "a result over MaxResultSize is refused")
	require.NoError(t, first, "a result within the bound is taken")
	require.ErrorIs(t, late, bus.ErrAlreadySettled, "a result set after the ack is refused")
	require.ErrorIs(t, received, bus.ErrAlreadySettled, "in AckOnReceive the delivery is acked before the handler sets a result")
	_, err = h.bus.Result(ctx, topic, "")
	require.ErrorIs(t, err, bus.ErrInvalidMessage, "an empty message ID is refused")
}
