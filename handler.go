package bus

import "context"

// Handler handles one delivery. In AckOnSuccess its return value settles
// the delivery; in AckManual the handler settles it itself.
type Handler func(ctx context.Context, d *Delivery) error

// Middleware wraps a Handler. See package middleware.
type Middleware func(Handler) Handler

// PublishFunc publishes a batch; it is the shape publish middleware wraps.
type PublishFunc func(ctx context.Context, topic string, msgs []*Message) error

// PublishMiddleware wraps the publish path (WithPublishMiddleware). It runs
// after IDs are assigned and before validation and I/O; it may add headers.
type PublishMiddleware func(PublishFunc) PublishFunc

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
