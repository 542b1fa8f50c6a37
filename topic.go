package bus

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"time"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/msgid"
)

// Headers the typed layer writes on every message of a Topic (without
// CloudEvents; see WithCloudEvents for the headers a CloudEvents binding
// uses instead). A producer outside bus sets them to be read by a typed
// subscription; a message without them is decoded by the topic's codec
// all the same.
const (
	// HeaderContentType is the media type of the payload (Codec.ContentType).
	HeaderContentType = "content-type"
	// HeaderEventType is the event type (see NewTopic) by which a Router
	// picks a handler.
	HeaderEventType = "event-type"
)

// EventTyper is implemented by an event type that names itself on the
// wire, as River's JobArgs.Kind does: NewTopic takes the event type from
// the zero value's EventType, unless WithEventType sets it.
type EventTyper interface {
	EventType() string
}

// Topic is a topic declared once with its Go type T and its codec, so that
// publishers and consumers agree at compile time:
//
//	var OrderPaid = bus.NewTopic[OrderPaidEvent]("orders.paid")
//
//	err := OrderPaid.Publish(ctx, b, OrderPaidEvent{ID: "o-1"}, bus.WithKey("o-1"))
//	sub, err := OrderPaid.Subscribe(ctx, b, func(ctx context.Context, e OrderPaidEvent, d *bus.Delivery) error { ... })
//
// It is a thin layer over the untyped API: a typed message is a Message
// whose payload is the codec's encoding and whose headers carry the
// content type and the event type; every subscribe option works as with
// Bus.Subscribe. A Topic is immutable and safe for concurrent use.
//
// # Decoding
//
// A typed subscription decodes each delivery before its middleware and
// handler run. A message the codec cannot decode, or whose content type
// the codec does not read, never reaches them: it is dead-lettered with
// code undecodable (CodeUndecodable), the codec's error in the reason, in
// every ack mode. Middleware that rewrites the payload does not change
// what the handler gets; transform payloads in a Codec instead.
type Topic[T any] struct {
	name      string
	codec     Codec
	eventType string
	ce        *CloudEvents
	err       error
}

// TopicOption configures a Topic (NewTopic) or a Router (NewRouter).
type TopicOption interface {
	applyTopic(*topicOptions) error
}

type topicOptions struct {
	codec     Codec
	eventType string
	ce        *CloudEvents
}

type topicOptionFunc func(*topicOptions) error

func (f topicOptionFunc) applyTopic(o *topicOptions) error { return f(o) }

// WithCodec sets a topic's codec; the default is JSON. A nil codec is
// refused with an error wrapping ErrInvalidOption.
func WithCodec(c Codec) TopicOption {
	return topicOptionFunc(func(o *topicOptions) error {
		if c == nil {
			return fmt.Errorf("%w: nil codec", ErrInvalidOption)
		}
		o.codec = c
		return nil
	})
}

// WithEventType sets a topic's event type, the name its messages carry in
// HeaderEventType (or CloudEvents' type attribute) and by which a Router
// routes them. Without it the type is T's EventType (see EventTyper), or
// else the name of the Go type T. Set it when more than one Go type
// shares a topic, so that renaming a Go type does not rename its events.
// It must be a non-empty valid UTF-8 string of at most 256 bytes.
func WithEventType(name string) TopicOption {
	return topicOptionFunc(func(o *topicOptions) error {
		if err := checkEventType(name); err != nil {
			return err
		}
		o.eventType = name
		return nil
	})
}

func checkEventType(name string) error {
	if name == "" || len(name) > MaxHeaderKeyLen {
		return fmt.Errorf("%w: event type %q: want 1 to %d bytes", ErrInvalidOption, name, MaxHeaderKeyLen)
	}
	return nil
}

// NewTopic declares the topic name carrying values of type T. Options
// set the codec (JSON by default), the event type and CloudEvents. An
// invalid name or option is returned by every call of the topic, as an
// error wrapping ErrInvalidTopic or ErrInvalidOption, so that a topic can
// be a package-level variable.
func NewTopic[T any](name string, opts ...TopicOption) *Topic[T] {
	o, err := newTopicOptions(name, opts)
	t := &Topic[T]{name: name, codec: o.codec, eventType: o.eventType, ce: o.ce, err: err}
	if t.eventType == "" {
		t.eventType = eventTypeOf[T]()
	}
	if err == nil && t.ce != nil && t.eventType == "" {
		t.err = fmt.Errorf("bus: topic %q: %w: CloudEvents need an event type (WithEventType)", name, ErrInvalidOption)
	}
	return t
}

func newTopicOptions(name string, opts []TopicOption) (topicOptions, error) {
	o := topicOptions{codec: JSON()}
	if err := backend.ValidateTopic(name); err != nil {
		return o, fmt.Errorf("bus: topic: %w", err)
	}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt.applyTopic(&o); err != nil {
			return o, fmt.Errorf("bus: topic %q: %w", name, err)
		}
	}
	return o, nil
}

// eventTypeOf is T's EventType, or the name of T ("" for an unnamed
// type such as []byte).
func eventTypeOf[T any]() string {
	var zero T
	if et, ok := any(zero).(EventTyper); ok {
		return et.EventType()
	}
	if et, ok := any(&zero).(EventTyper); ok {
		return et.EventType()
	}
	return reflect.TypeFor[T]().Name()
}

// Name returns the topic's name.
func (t *Topic[T]) Name() string { return t.name }

// EventType returns the event type the topic's messages carry.
func (t *Topic[T]) EventType() string { return t.eventType }

// Codec returns the topic's codec.
func (t *Topic[T]) Codec() Codec { return t.codec }

// Event is one value to publish with its message fields, for
// Topic.PublishEvents. The fields mean what Message's do.
type Event[T any] struct {
	Value     T
	ID        string
	Key       string
	Headers   map[string]string
	DeliverAt time.Time
	ExpiresAt time.Time
}

// EventOption sets a field of the message a typed Publish sends.
type EventOption func(*Message)

// WithID sets the message ID (Message.ID); by default the bus assigns one.
func WithID(id string) EventOption { return func(m *Message) { m.ID = id } }

// WithKey sets the ordering and partition key (Message.Key).
func WithKey(key string) EventOption { return func(m *Message) { m.Key = key } }

// WithHeader adds a header. The typed layer's own headers (the content
// type, the event type, CloudEvents attributes) win over one of the same
// name.
func WithHeader(key, value string) EventOption {
	return func(m *Message) {
		if m.Headers == nil {
			m.Headers = make(map[string]string, 4)
		}
		m.Headers[key] = value
	}
}

// WithDeliverAt sets when the message is delivered at the earliest
// (Message.DeliverAt).
func WithDeliverAt(at time.Time) EventOption { return func(m *Message) { m.DeliverAt = at } }

// WithExpiresAt sets when the message expires (Message.ExpiresAt).
func WithExpiresAt(at time.Time) EventOption { return func(m *Message) { m.ExpiresAt = at } }

// Message returns the untyped message of v: its payload the codec's
// encoding, its headers the content type and event type (or CloudEvents
// attributes) plus those the options set. It is how a typed value reaches
// an untyped path, such as an outbox's publish inside a transaction. An
// encoding error wraps ErrInvalidMessage.
func (t *Topic[T]) Message(v T, opts ...EventOption) (*Message, error) {
	m, _, err := t.message(v, opts)
	return m, err
}

// message is Message, and the ID it generated (see assignIDs).
func (t *Topic[T]) message(v T, opts []EventOption) (*Message, generatedIDs, error) {
	if t.err != nil {
		return nil, "", t.err
	}
	m := &Message{}
	for _, o := range opts {
		if o != nil {
			o(m)
		}
	}
	gen := t.assignIDs([]*Message{m})
	if err := t.fill(m, v); err != nil {
		return nil, "", fmt.Errorf("bus: publish %q: %w", t.name, err)
	}
	return m, gen, nil
}

// assignIDs gives the messages without an ID one, when the topic writes
// CloudEvents (whose id is the message ID), and returns those IDs in
// message order, for the bus to know them as its own (publish
// deduplication costs nothing for them). Without CloudEvents, Publish
// assigns them.
func (t *Topic[T]) assignIDs(msgs []*Message) generatedIDs {
	if t.ce == nil {
		return ""
	}
	missing := 0
	for _, m := range msgs {
		if m.ID == "" {
			missing++
		}
	}
	if missing == 0 {
		return ""
	}
	ids := msgid.Batch(missing)
	gen := generatedIDs(ids)
	for _, m := range msgs {
		if m.ID == "" {
			m.ID, ids = ids[:36], ids[36:]
		}
	}
	return gen
}

// fill sets m's payload to v's encoding and adds the typed headers to a
// copy of m's.
func (t *Topic[T]) fill(m *Message, v T) error {
	payload, err := t.codec.Encode(v)
	if err != nil {
		return fmt.Errorf("%w: encode %T: %w", ErrInvalidMessage, v, err)
	}
	m.Payload = payload
	h := make(map[string]string, len(m.Headers)+7)
	maps.Copy(h, m.Headers)
	if t.ce != nil {
		t.ce.write(h, m.ID, t.eventType, t.codec.ContentType(), time.Now())
	} else {
		h[HeaderContentType] = t.codec.ContentType()
		if t.eventType != "" {
			h[HeaderEventType] = t.eventType
		}
	}
	m.Headers = h
	return nil
}

// Publish publishes v with the fields the options set, as Bus.Publish
// does (p is a *Bus, or a Publisher wrapping one).
func (t *Topic[T]) Publish(ctx context.Context, p Publisher, v T, opts ...EventOption) error {
	m, gen, err := t.message(v, opts)
	if err != nil {
		return err
	}
	return t.publish(ctx, p, []*Message{m}, gen)
}

// PublishEvents publishes a batch, as Bus.Publish does: a batch that
// partly fails returns a *PublishError naming the IDs that failed. An
// event that cannot be encoded fails the whole batch before any I/O.
func (t *Topic[T]) PublishEvents(ctx context.Context, p Publisher, evs ...Event[T]) error {
	if t.err != nil {
		return t.err
	}
	msgs := make([]*Message, len(evs))
	backing := make([]Message, len(evs))
	for i := range evs {
		e := &evs[i]
		m := &backing[i]
		m.ID, m.Key, m.Headers, m.DeliverAt, m.ExpiresAt = e.ID, e.Key, e.Headers, e.DeliverAt, e.ExpiresAt
		msgs[i] = m
	}
	gen := t.assignIDs(msgs)
	for i := range evs {
		if err := t.fill(msgs[i], evs[i].Value); err != nil {
			return fmt.Errorf("bus: publish %q: event %d: %w", t.name, i, err)
		}
	}
	return t.publish(ctx, p, msgs, gen)
}

// publish publishes msgs on p; on a *Bus, the IDs in gen count as the
// bus's own.
func (t *Topic[T]) publish(ctx context.Context, p Publisher, msgs []*Message, gen generatedIDs) error {
	if p == nil {
		return fmt.Errorf("bus: publish %q: %w: nil publisher", t.name, ErrInvalidOption)
	}
	if b, ok := p.(*Bus); ok && gen != "" {
		if b.optErr != nil {
			return b.optErr
		}
		return b.publishAssigned(ctx, t.name, msgs, gen)
	}
	return p.Publish(ctx, t.name, msgs...)
}

// PublishAsync publishes v on b as Bus.PublishAsync does: the result
// confirms it later.
func (t *Topic[T]) PublishAsync(ctx context.Context, b *Bus, v T, opts ...EventOption) *PublishResult {
	if b == nil {
		return failedResult(fmt.Errorf("bus: publish %q: %w: nil bus", t.name, ErrInvalidOption))
	}
	m, gen, err := t.message(v, opts)
	if err != nil {
		return failedResult(err)
	}
	if gen == "" {
		return b.PublishAsync(ctx, t.name, m)
	}
	if err := b.asyncPrecheck(t.name); err != nil {
		return failedResult(err)
	}
	return b.publishAsyncAssigned(ctx, t.name, m, string(gen))
}
