package watermill

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/eventbus-go/bus"
)

// ErrClosed is returned by Publish after Close and by Subscribe after the
// Subscriber's Close.
var ErrClosed = errors.New("watermill: closed")

// DefaultPublishTimeout bounds a Publish call when PublisherConfig leaves
// PublishTimeout zero.
const DefaultPublishTimeout = 30 * time.Second

// PublisherConfig configures a Publisher. The zero value is valid.
type PublisherConfig struct {
	// KeyMetadata names the metadata entry whose value becomes the bus
	// message's Key (for key ordering and partitions, see
	// bus.WithKeyOrdering). The entry stays in the metadata. Empty: no key.
	KeyMetadata string
	// Key, when set, picks the Key of each message; it wins over
	// KeyMetadata. It is called once per message, from the goroutine that
	// calls Publish.
	Key func(*message.Message) string
	// IgnoreDelay turns off the mapping of the metadata entry
	// delay.DelayedUntilKey ("_watermill_delayed_until", RFC 3339, as
	// Watermill's components/delay writes it) onto bus.Message.DeliverAt.
	// With the mapping on (the default), a message with that entry is not
	// delivered before its time; a value that does not parse is refused
	// with bus.ErrInvalidMessage before any I/O.
	IgnoreDelay bool
	// PublishTimeout bounds one Publish call, the broker's confirmation
	// included (default DefaultPublishTimeout). Watermill's Publish takes
	// no context; this is its deadline.
	PublishTimeout time.Duration
}

// Publisher is a Watermill message.Publisher that publishes through a
// bus.Bus. It is safe for concurrent use.
type Publisher struct {
	b      *bus.Bus
	cfg    PublisherConfig
	closed atomic.Bool
}

var _ message.Publisher = (*Publisher)(nil)

// NewPublisher returns a Publisher over b. The Publisher does not own b:
// its Close leaves b open, and b must outlive it.
func NewPublisher(b *bus.Bus, cfg PublisherConfig) (*Publisher, error) {
	if b == nil {
		return nil, fmt.Errorf("%w: nil bus", bus.ErrInvalidOption)
	}
	if cfg.PublishTimeout < 0 {
		return nil, fmt.Errorf("%w: publish timeout %v, want >= 0", bus.ErrInvalidOption, cfg.PublishTimeout)
	}
	if cfg.PublishTimeout == 0 {
		cfg.PublishTimeout = DefaultPublishTimeout
	}
	return &Publisher{b: b, cfg: cfg}, nil
}

// Publish publishes msgs to topic in one bus.Bus.Publish call (one batch):
// it returns nil once the broker has stored them all, and an error from
// which errors.As gets a *bus.PublishError saying which failed otherwise.
// A message that cannot be mapped (see HeaderEncoded and PublisherConfig)
// fails the call before any I/O.
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	if p.closed.Load() {
		return ErrClosed
	}
	out := make([]*bus.Message, len(msgs))
	for i, msg := range msgs {
		m, err := p.cfg.toBus(msg)
		if err != nil {
			return fmt.Errorf("watermill: publish %q: message %d: %w", topic, i, err)
		}
		out[i] = m
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.PublishTimeout)
	defer cancel()
	return p.b.Publish(ctx, topic, out...)
}

// Close makes later Publish calls return ErrClosed. Publish confirms
// before it returns, so nothing is left to flush; the bus stays open.
func (p *Publisher) Close() error {
	p.closed.Store(true)
	return nil
}
