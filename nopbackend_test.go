package bus_test

import (
	"context"
	"time"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
)

// nopBackend accepts everything and delivers nothing; tests embed it to
// count calls.
type nopBackend struct{}

func (nopBackend) Publish(context.Context, string, []*bus.BackendMessage) error { return nil }
func (nopBackend) Subscribe(context.Context, string, backend.SubscribeConfig) (backend.Subscription, error) {
	return nopSub{}, nil
}
func (nopBackend) Capabilities() bus.Capabilities {
	return bus.Capabilities{Name: "nop", Redelivery: true, ConsumerGroups: true}
}
func (nopBackend) Close() error { return nil }

type nopSub struct{}

func (nopSub) Receive(ctx context.Context, _ int) ([]*bus.BackendMessage, error) {
	t := time.NewTimer(100 * time.Millisecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-t.C:
		return nil, nil
	}
}
func (nopSub) Ack(context.Context, []backend.AckID) error               { return nil }
func (nopSub) Nack(context.Context, backend.AckID, time.Duration) error { return nil }
func (nopSub) Close() error                                             { return nil }
