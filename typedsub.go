package bus

import (
	"context"
	"errors"
	"fmt"
)

// EventHandler handles one decoded event of a typed subscription: v is
// the decoded payload, d the delivery with its message, attempt and
// settlement methods. Its error is read as a Handler's.
type EventHandler[T any] func(ctx context.Context, v T, d *Delivery) error

// Subscribe subscribes h to the topic on s (a *Bus, or a Subscriber
// wrapping one) with the options of Bus.Subscribe: every delivery is
// decoded by the topic's codec before the middleware and h run, and one
// that does not decode is dead-lettered with code undecodable (see
// Topic).
func (t *Topic[T]) Subscribe(ctx context.Context, s Subscriber, h EventHandler[T], opts ...SubscribeOption) (*Subscription, error) {
	if t.err != nil {
		return nil, t.err
	}
	if s == nil {
		return nil, fmt.Errorf("bus: subscribe %q: %w: nil subscriber", t.name, ErrInvalidOption)
	}
	if h == nil {
		return nil, fmt.Errorf("bus: subscribe %q: %w: nil handler", t.name, ErrInvalidOption)
	}
	return s.Subscribe(ctx, t.name, t.Handler(h), append(opts[:len(opts):len(opts)], decoderOption{t})...)
}

// Handler returns h as an untyped Handler of the topic: for a
// subscription made by Topic.Subscribe it hands h the value decoded
// before the middleware ran; on any other path (Bus.Subscribe, bustest,
// an inbox's handler) it decodes the delivery itself, and rejects one
// that does not decode with code undecodable, without calling h.
func (t *Topic[T]) Handler(h EventHandler[T]) Handler {
	return func(ctx context.Context, d *Delivery) error {
		if p, ok := d.decoded().(*T); ok {
			return h(ctx, *p, d)
		}
		v, err := t.decode(d)
		if err != nil {
			return rejectUndecodable(ctx, d, err)
		}
		return h(ctx, *v.(*T), d)
	}
}

// Decode returns the value of d, as a typed subscription of the topic
// decodes it: an error when the codec does not read d's content type or
// cannot decode its payload.
func (t *Topic[T]) Decode(d *Delivery) (T, error) {
	v, err := t.decode(d)
	if err != nil {
		var zero T
		return zero, err
	}
	return *v.(*T), nil
}

// decode is the topic's decoder: a *T, or an error for a delivery that
// must not reach the handler.
func (t *Topic[T]) decode(d *Delivery) (any, error) {
	w := wire{t.ce}
	if err := checkContentType(t.codec, w.contentType(d.Headers)); err != nil {
		return nil, err
	}
	p := new(T)
	if err := t.codec.Decode(d.Payload, p); err != nil {
		return nil, fmt.Errorf("decode %s as %T: %w", t.codec.ContentType(), *p, err)
	}
	return p, nil
}

func checkContentType(c Codec, ct string) error {
	if !readsContentType(c, ct) {
		return fmt.Errorf("content type %q is not read by the codec of %q", ct, c.ContentType())
	}
	return nil
}

// rejectUndecodable dead-letters d with code undecodable from a handler.
func rejectUndecodable(ctx context.Context, d *Delivery, err error) error {
	reason := withCode(CodeUndecodable, err)
	if d.Reject(ctx, reason) != nil {
		// Detached, or settled already (AckOnReceive): the error is the
		// handler's.
		return Reject(reason)
	}
	return nil
}

// decoder decodes each delivery of a typed subscription before its
// middleware and handler run (see consumer.process): the value goes to
// the handler through Delivery.decoded; an error dead-letters the
// delivery with the error's code (undecodable unless it carries one);
// errSkip acks it without running the handler.
type decoder interface {
	decode(d *Delivery) (any, error)
}

// errSkip is a decoder's verdict on a delivery the subscription acks
// without handling it.
var errSkip = errors.New("skip")

// decoderOption is the subscribe option that sets the decoder.
type decoderOption struct{ d decoder }

func (o decoderOption) applySubscribe(s *subscribeOptions) error {
	s.decoder = o.d
	return nil
}

// decoded is the value the subscription's decoder made of d, or nil.
func (d *Delivery) decoded() any {
	if d.rec == nil {
		return nil
	}
	return (*handlerCtx)(d.rec).decoded()
}

// wire says in which headers a typed message's content type and event
// type travel: HeaderContentType and HeaderEventType, or a CloudEvents
// binding's.
type wire struct{ ce *CloudEvents }

func (w wire) contentType(h map[string]string) string {
	if w.ce == nil {
		return h[HeaderContentType]
	}
	v, _ := w.ce.Binding.Attribute(h, "datacontenttype")
	return v
}

func (w wire) eventType(h map[string]string) string {
	if w.ce == nil {
		return h[HeaderEventType]
	}
	v, _ := w.ce.Binding.Attribute(h, "type")
	return v
}
