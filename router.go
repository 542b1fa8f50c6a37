package bus

import (
	"context"
	"fmt"
	"maps"
	"sync"

	"github.com/eventbus-go/bus/backend"
)

// Router routes the events of a topic that carries several event types
// (an event-sourced or CQRS stream) to one handler per type, by the event
// type each message carries (HeaderEventType, or CloudEvents' type):
//
//	var (
//		Paid    = bus.NewTopic[OrderPaid]("orders", bus.WithEventType("order.paid"))
//		Shipped = bus.NewTopic[OrderShipped]("orders", bus.WithEventType("order.shipped"))
//	)
//	r := bus.NewRouter("orders")
//	bus.Route(r, Paid, onPaid)
//	bus.Route(r, Shipped, onShipped)
//	sub, err := r.Subscribe(ctx, b, bus.WithGroup("shipping"))
//
// Each type is decoded by its topic's codec before the middleware and
// handler run; one that does not decode is dead-lettered with code
// undecodable, as for Topic.Subscribe. A type no route knows is
// dead-lettered with code unknown_type, or acked without a handler with
// WithUnknownTypes(SkipUnknown).
//
// Route is called before Subscribe or Handler, which take the routes as
// they stand; a Router is safe for concurrent use.
type Router struct {
	name    string
	unknown UnknownTypes
	err     error

	mu     sync.Mutex
	ce     *CloudEvents
	routes map[string]route
}

// UnknownTypes says what a Router does with an event type it has no
// route for.
type UnknownTypes int

const (
	// DeadLetterUnknown dead-letters it with code unknown_type (the
	// default): a consumer that falls behind its producers' types does
	// not lose their events.
	DeadLetterUnknown UnknownTypes = iota
	// SkipUnknown acks it without running a handler: for a consumer that
	// wants only some of a stream's types.
	SkipUnknown
)

// RouterOption configures a Router.
type RouterOption func(*Router) error

// WithUnknownTypes sets what a Router does with an event type it has no
// route for; the default is DeadLetterUnknown.
func WithUnknownTypes(u UnknownTypes) RouterOption {
	return func(r *Router) error {
		if u != DeadLetterUnknown && u != SkipUnknown {
			return fmt.Errorf("%w: unknown types %d", ErrInvalidOption, u)
		}
		r.unknown = u
		return nil
	}
}

// NewRouter returns a Router of the topic name, without routes. An
// invalid name or option is returned by Subscribe.
func NewRouter(name string, opts ...RouterOption) *Router {
	r := &Router{name: name, routes: map[string]route{}}
	if err := backend.ValidateTopic(name); err != nil {
		r.err = fmt.Errorf("bus: router: %w", err)
		return r
	}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(r); err != nil {
			r.err = fmt.Errorf("bus: router %q: %w", name, err)
			return r
		}
	}
	return r
}

// Route routes the events of t's event type on r to h. It panics, as
// http.ServeMux.Handle does, when t is not of r's topic, when another
// route has the same event type, when h is nil, or when t's CloudEvents
// setting differs from the other routes' (they must carry the type in
// the same header).
func Route[T any](r *Router, t *Topic[T], h EventHandler[T]) {
	if h == nil || t == nil {
		panic("bus: Route: nil topic or handler")
	}
	if t.name != r.name {
		panic(fmt.Sprintf("bus: Route: topic %q on the router of %q", t.name, r.name))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.routes[t.eventType]; dup {
		panic(fmt.Sprintf("bus: Route: event type %q of %q routed twice", t.eventType, r.name))
	}
	if len(r.routes) > 0 && !sameCloudEvents(r.ce, t.ce) {
		panic(fmt.Sprintf("bus: Route: event type %q of %q has other CloudEvents settings than the routes before it", t.eventType, r.name))
	}
	if t.err != nil && r.err == nil {
		r.err = t.err
	}
	r.ce = t.ce
	r.routes[t.eventType] = typedRoute[T]{t, h}
}

func sameCloudEvents(a, b *CloudEvents) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Binding == b.Binding
}

// Subscribe subscribes the router's routes on s with the options of
// Bus.Subscribe.
func (r *Router) Subscribe(ctx context.Context, s Subscriber, opts ...SubscribeOption) (*Subscription, error) {
	if r.err != nil {
		return nil, r.err
	}
	if s == nil {
		return nil, fmt.Errorf("bus: subscribe %q: %w: nil subscriber", r.name, ErrInvalidOption)
	}
	rt := r.table()
	if len(rt.routes) == 0 {
		return nil, fmt.Errorf("bus: subscribe %q: %w: a router without routes", r.name, ErrInvalidOption)
	}
	return s.Subscribe(ctx, r.name, rt.handle, append(opts[:len(opts):len(opts)], decoderOption{rt})...)
}

// Handler returns the router as an untyped Handler of its topic, for
// paths other than Router.Subscribe (Bus.Subscribe, bustest, an inbox):
// it decodes each delivery itself, and dead-letters one that does not
// decode or has an unknown type (or acks it, with SkipUnknown).
func (r *Router) Handler() Handler { return r.table().handle }

// table is a snapshot of r's routes.
func (r *Router) table() *routeTable {
	r.mu.Lock()
	defer r.mu.Unlock()
	return &routeTable{name: r.name, unknown: r.unknown, w: wire{r.ce}, routes: maps.Clone(r.routes)}
}

// route is the typed half of one Router route.
type route interface {
	decode(d *Delivery) (any, error)
	call(ctx context.Context, v any, d *Delivery) error
}

type typedRoute[T any] struct {
	t *Topic[T]
	h EventHandler[T]
}

func (r typedRoute[T]) decode(d *Delivery) (any, error) { return r.t.decode(d) }

func (r typedRoute[T]) call(ctx context.Context, v any, d *Delivery) error {
	p, ok := v.(*T)
	if !ok {
		dv, err := r.t.decode(d)
		if err != nil {
			return rejectUndecodable(ctx, d, err)
		}
		p = dv.(*T)
	}
	return r.h(ctx, *p, d)
}

// routeTable is the routes a subscription of a Router runs with; it is
// the subscription's decoder.
type routeTable struct {
	name    string
	unknown UnknownTypes
	w       wire
	routes  map[string]route
}

// lookup returns the route of d's event type, or the error that keeps d
// from any handler.
func (rt *routeTable) lookup(d *Delivery) (route, error) {
	et := rt.w.eventType(d.Headers)
	if r, ok := rt.routes[et]; ok {
		return r, nil
	}
	if rt.unknown == SkipUnknown {
		return nil, errSkip
	}
	return nil, withCode(CodeUnknownType, fmt.Errorf("no route on %q for event type %q", rt.name, et))
}

func (rt *routeTable) decode(d *Delivery) (any, error) {
	r, err := rt.lookup(d)
	if err != nil {
		return nil, err
	}
	return r.decode(d)
}

func (rt *routeTable) handle(ctx context.Context, d *Delivery) error {
	r, err := rt.lookup(d)
	switch {
	case err == errSkip:
		_ = d.Ack(ctx) // an error: settled already (AckOnReceive)
		return nil
	case err != nil:
		if d.Reject(ctx, err) != nil {
			return Reject(err)
		}
		return nil
	}
	return r.call(ctx, d.decoded(), d)
}
