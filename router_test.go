package bus_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/bustest"
)

type orderShipped struct {
	OrderID string `json:"order_id"`
	Carrier string `json:"carrier"`
}

var (
	paidEvents    = bus.NewTopic[orderPaid]("orders", bus.WithEventType("order.paid"))
	shippedEvents = bus.NewTopic[orderShipped]("orders", bus.WithEventType("order.shipped"))
	refundEvents  = bus.NewTopic[orderPaid]("orders", bus.WithEventType("order.refunded"))
)

// routed records what a router's handlers got, in order.
type routed struct {
	mu  sync.Mutex
	got []string
	ch  chan struct{}
}

func newRouted() *routed { return &routed{ch: make(chan struct{}, 16)} }

func (r *routed) add(s string) {
	r.mu.Lock()
	r.got = append(r.got, s)
	r.mu.Unlock()
	r.ch <- struct{}{}
}

func (r *routed) router(opts ...bus.RouterOption) *bus.Router {
	rt := bus.NewRouter("orders", opts...)
	bus.Route(rt, paidEvents, func(_ context.Context, v orderPaid, d *bus.Delivery) error {
		r.add("paid " + v.OrderID)
		return ackManual(d)
	})
	bus.Route(rt, shippedEvents, func(_ context.Context, v orderShipped, d *bus.Delivery) error {
		r.add("shipped " + v.OrderID + " by " + v.Carrier)
		return ackManual(d)
	})
	return rt
}

// ackManual acks d when its handler is to settle it (AckManual).
func ackManual(d *bus.Delivery) error {
	if d.Outcome() == bus.OutcomePending {
		return d.Ack(context.Background())
	}
	return nil
}

func TestRouterRoutesEachTypeToItsHandlerInOrder(t *testing.T) {
	ctx := context.Background()
	b := openMem(t)
	rec := newRouted()
	_, err := rec.router().Subscribe(ctx, b, bus.WithKeyOrdering())
	require.NoError(t, err)
	require.NoError(t, paidEvents.Publish(ctx, b, orderPaid{"o-1", 100}, bus.WithKey("o-1")))
	require.NoError(t, shippedEvents.Publish(ctx, b, orderShipped{"o-1", "dhl"}, bus.WithKey("o-1")))
	require.NoError(t, paidEvents.Publish(ctx, b, orderPaid{"o-2", 100}, bus.WithKey("o-1")))
	for range 3 {
		recvWhat(t, rec.ch, "a routed event")
	}
	assert.Equal(t, []string{"paid o-1", "shipped o-1 by dhl", "paid o-2"}, rec.got, "each type to its handler, in key order")
}

func TestRouterUnknownTypeIsDeadLetteredOrSkipped(t *testing.T) {
	tests := []struct {
		name     string
		opts     []bus.RouterOption
		deadLetr bool
	}{
		{"dead-letter by default", nil, true},
		{"skip", []bus.RouterOption{bus.WithUnknownTypes(bus.SkipUnknown)}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			b := openMem(t)
			dlq := collectDLQ(t, b, "orders.dlq")
			rec := newRouted()
			_, err := rec.router(tt.opts...).Subscribe(ctx, b, bus.WithAckMode(bus.AckManual))
			require.NoError(t, err)
			require.NoError(t, refundEvents.Publish(ctx, b, orderPaid{"o-1", 5}, bus.WithID("refund")))
			require.NoError(t, b.Publish(ctx, "orders", &bus.Message{ID: "bad-shipped",
				Headers: map[string]string{bus.HeaderEventType: "order.shipped"}, Payload: []byte(`{"carrier": 7}`)}))
			require.NoError(t, paidEvents.Publish(ctx, b, orderPaid{"o-2", 5}))
			recvWhat(t, rec.ch, "the known type")
			var dead []string
			want := []string{"bad-shipped"}
			if tt.deadLetr {
				want = append(want, "refund")
			}
			codes := map[string]string{}
			for range want {
				d := recvWhat(t, dlq, "a dead letter")
				dead = append(dead, d.ID)
				codes[d.ID] = d.Headers[bus.HeaderDeadLetterCode]
			}
			assert.ElementsMatch(t, want, dead, "dead letters")
			assert.Equal(t, string(bus.CodeUndecodable), codes["bad-shipped"], "a known type that does not decode")
			if tt.deadLetr {
				assert.Equal(t, string(bus.CodeUnknownType), codes["refund"], "an unknown type")
			}
			require.NoError(t, b.Flush(ctx))
			assert.Equal(t, []string{"paid o-2"}, rec.got, "only the known, decodable type is handled")
		})
	}
}

func TestRouterHandlerRoutesOnTheUntypedPath(t *testing.T) {
	rec := newRouted()
	h := rec.router().Handler()
	m, err := shippedEvents.Message(orderShipped{"o-9", "ups"})
	require.NoError(t, err)
	res := bustest.Run(t, h, m)
	require.Equal(t, bus.OutcomeAcked, res.Outcome, res.String())
	assert.Equal(t, []string{"shipped o-9 by ups"}, rec.got, "routed by type")

	m, err = refundEvents.Message(orderPaid{"o-9", 1})
	require.NoError(t, err)
	res = bustest.Run(t, h, m)
	assert.Equal(t, bus.CodeUnknownType, res.Code, res.String())

	res = bustest.Run(t, rec.router(bus.WithUnknownTypes(bus.SkipUnknown)).Handler(), m)
	assert.Equal(t, bus.OutcomeAcked, res.Outcome, "skipped: "+res.String())
	assert.False(t, res.DeadLetter != nil, "skipped, not dead-lettered")
}

func TestRouterRefusesBadSetup(t *testing.T) {
	ctx := context.Background()
	b := openMem(t)
	_, err := bus.NewRouter("orders").Subscribe(ctx, b)
	assert.ErrorIs(t, err, bus.ErrInvalidOption, "no routes")
	_, err = bus.NewRouter("bad topic").Subscribe(ctx, b)
	assert.ErrorIs(t, err, bus.ErrInvalidTopic, "bad name")
	_, err = bus.NewRouter("orders", bus.WithUnknownTypes(7)).Subscribe(ctx, b)
	assert.ErrorIs(t, err, bus.ErrInvalidOption, "bad unknown-types policy")
	h := func(context.Context, orderPaid, *bus.Delivery) error { return nil }
	assert.Panics(t, func() { bus.Route(bus.NewRouter("other"), paidEvents, h) }, "a topic of another name")
	assert.Panics(t, func() {
		r := bus.NewRouter("orders")
		bus.Route(r, paidEvents, h)
		bus.Route(r, paidEvents, h)
	}, "a type routed twice")
}
