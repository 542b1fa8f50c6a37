package bus_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
)

func TestZeroDeliveryReturnsClearErrors(t *testing.T) {
	t.Parallel()
	d := &bus.Delivery{}
	ctx := context.Background()
	for name, err := range map[string]error{
		"ack":    d.Ack(ctx),
		"nack":   d.Nack(ctx, time.Second),
		"reject": d.Reject(ctx, errors.New("x")),
		"extend": d.Extend(ctx),
	} {
		require.ErrorIs(t, err, bus.ErrInvalidMessage, "%s on a zero Delivery", name)
		assert.Contains(t, err.Error(), "not from a subscription", "%s: the error says what is wrong", name)
		assert.Contains(t, err.Error(), "bustest.NewDelivery", "%s: the error says what to use instead", name)
	}
}

func TestNewNilBackendReturnsClearErrors(t *testing.T) {
	t.Parallel()
	b := bus.New(nil)
	ctx := context.Background()
	require.ErrorIs(t, b.Publish(ctx, "t", &bus.Message{}), bus.ErrInvalidOption)
	_, err := b.Subscribe(ctx, "t", func(context.Context, *bus.Delivery) error { return nil })
	require.ErrorIs(t, err, bus.ErrInvalidOption)
	assert.Contains(t, err.Error(), "nil backend")
	_, err = b.Topics(ctx)
	require.ErrorIs(t, err, bus.ErrInvalidOption)
	require.NoError(t, b.Close(ctx), "closing it is harmless")
}
