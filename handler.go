package bus

import "context"

// Handler handles one delivery. In AckOnSuccess its return value settles
// the delivery; in AckManual the handler settles it itself.
type Handler func(ctx context.Context, d *Delivery) error

// Middleware wraps a Handler. See package middleware.
type Middleware func(Handler) Handler

// PublishMiddleware wraps the publish path (WithPublishMiddleware): it
// returns a Publisher that does its work and calls next. It runs after IDs
// are assigned and before validation and I/O; it may add headers (to
// copies: the caller's messages are its own). middleware.PublishFunc turns
// a function into a Publisher.
type PublishMiddleware func(next Publisher) Publisher

// Publisher publishes messages. *Bus implements it.
type Publisher interface {
	Publish(ctx context.Context, topic string, msgs ...*Message) error
}

// Subscriber subscribes handlers to topics. *Bus implements it.
type Subscriber interface {
	Subscribe(ctx context.Context, topic string, h Handler, opts ...SubscribeOption) (*Subscription, error)
}

var (
	_ Publisher  = (*Bus)(nil)
	_ Subscriber = (*Bus)(nil)
)
