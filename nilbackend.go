package bus

import (
	"context"

	"github.com/eventbus-go/bus/backend"
)

// nilBackend stands in for the nil backend given to New, so that every
// call of such a Bus returns its error instead of panicking.
type nilBackend struct{}

func (nilBackend) Publish(context.Context, string, []*backend.Message) error { return ErrInvalidOption }
func (nilBackend) Subscribe(context.Context, string, backend.SubscribeConfig) (backend.Subscription, error) {
	return nil, ErrInvalidOption
}
func (nilBackend) Capabilities() Capabilities { return Capabilities{Name: "nil"} }
func (nilBackend) Close() error               { return nil }
