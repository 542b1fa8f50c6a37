package bus_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/bustest"
	"github.com/eventbus-go/bus/observer"
)

type orderPaid struct {
	OrderID string `json:"order_id"`
	Cents   int64  `json:"cents"`
}

type typedGot struct {
	v orderPaid
	d *bus.Delivery
}

func openMem(t *testing.T, opts ...bus.Option) *bus.Bus {
	t.Helper()
	ctx := context.Background()
	b, err := bus.Open(ctx, "mem://", append([]bus.Option{bus.WithObserver(observer.Nop())}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		assert.NoError(t, b.Close(ctx), "close the bus")
	})
	return b
}

func recvWhat[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitFor):
		t.Fatalf("timed out waiting for %s", what)
	}
	var zero T
	return zero
}

// collectDLQ subscribes to topic's dead letters and sends each to the
// returned channel.
func collectDLQ(t *testing.T, b *bus.Bus, dlq string) <-chan *bus.Delivery {
	t.Helper()
	ch := make(chan *bus.Delivery, 16)
	_, err := b.Subscribe(context.Background(), dlq, func(_ context.Context, d *bus.Delivery) error {
		ch <- d
		return nil
	}, bus.WithStartFrom(bus.StartOldest), bus.WithGroup("dlq-reader"))
	require.NoError(t, err)
	return ch
}

func TestTypedRoundTripCarriesValueFieldsAndContentType(t *testing.T) {
	ctx := context.Background()
	b := openMem(t)
	topic := bus.NewTopic[orderPaid]("orders.paid")
	got := make(chan typedGot, 4)
	_, err := topic.Subscribe(ctx, b, func(_ context.Context, v orderPaid, d *bus.Delivery) error {
		got <- typedGot{v, d}
		return nil
	}, bus.WithGroup("billing"))
	require.NoError(t, err)

	exp := time.Now().Add(time.Hour)
	due := time.Now().Add(100 * time.Millisecond)
	require.NoError(t, topic.Publish(ctx, b, orderPaid{"o-1", 1250},
		bus.WithID("id-1"), bus.WithKey("customer-7"), bus.WithHeader("tenant", "acme"), bus.WithExpiresAt(exp), bus.WithDeliverAt(due)))
	g := recvWhat(t, got, "the typed delivery")
	assert.False(t, time.Now().Before(due.Truncate(time.Millisecond)), "delivered no earlier than DeliverAt")
	assert.Equal(t, orderPaid{"o-1", 1250}, g.v, "the handler gets the decoded value")
	assert.Equal(t, "id-1", g.d.ID, "ID")
	assert.Equal(t, "customer-7", g.d.Key, "Key")
	assert.Equal(t, "acme", g.d.Headers["tenant"], "user header")
	assert.Equal(t, "application/json", g.d.Headers[bus.HeaderContentType], "content type header")
	assert.Equal(t, "orderPaid", g.d.Headers[bus.HeaderEventType], "event type header: the Go type name by default")
	assert.Equal(t, exp.UnixMilli(), g.d.ExpiresAt.UnixMilli(), "ExpiresAt")
	assert.JSONEq(t, `{"order_id":"o-1","cents":1250}`, string(g.d.Payload), "payload is the JSON encoding")
	assert.Equal(t, 1, g.d.Attempt, "Attempt")
}

func TestTypedPublishEventsAndAsyncKeepKeyOrder(t *testing.T) {
	ctx := context.Background()
	b := openMem(t)
	topic := bus.NewTopic[orderPaid]("orders.paid")
	got := make(chan typedGot, 16)
	_, err := topic.Subscribe(ctx, b, func(_ context.Context, v orderPaid, d *bus.Delivery) error {
		got <- typedGot{v, d}
		return nil
	}, bus.WithKeyOrdering(), bus.WithMaxInFlight(4))
	require.NoError(t, err)

	require.NoError(t, topic.PublishEvents(ctx, b,
		bus.Event[orderPaid]{Value: orderPaid{"o-1", 1}, Key: "k"},
		bus.Event[orderPaid]{Value: orderPaid{"o-2", 2}, Key: "k", Headers: map[string]string{"h": "v"}},
	))
	require.NoError(t, topic.PublishAsync(ctx, b, orderPaid{"o-3", 3}, bus.WithKey("k")).Get(ctx))
	for i, want := range []string{"o-1", "o-2", "o-3"} {
		g := recvWhat(t, got, want)
		assert.Equal(t, want, g.v.OrderID, "delivery %d in publish order", i)
		assert.Equal(t, int64(i+1), g.v.Cents, "delivery %d value", i)
		if i == 1 {
			assert.Equal(t, "v", g.d.Headers["h"], "an Event's headers travel")
		}
	}
}

func TestTypedUndecodableIsDeadLetteredAndNeverReachesHandler(t *testing.T) {
	tests := []struct {
		name string
		opts []bus.SubscribeOption
	}{
		{"on-success", nil},
		{"on-receive", []bus.SubscribeOption{bus.WithAckMode(bus.AckOnReceive)}},
		{"manual", []bus.SubscribeOption{bus.WithAckMode(bus.AckManual)}},
		{"on-receive-key-ordering", []bus.SubscribeOption{bus.WithAckMode(bus.AckOnReceive), bus.WithKeyOrdering()}},
		{"key-ordering", []bus.SubscribeOption{bus.WithKeyOrdering()}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			b := openMem(t)
			topic := bus.NewTopic[orderPaid]("orders.paid")
			dlq := collectDLQ(t, b, "orders.paid.dlq")
			var handled, middleware atomic.Int32
			got := make(chan orderPaid, 4)
			mw := func(next bus.Handler) bus.Handler {
				return func(ctx context.Context, d *bus.Delivery) error {
					middleware.Add(1)
					return next(ctx, d)
				}
			}
			opts := append([]bus.SubscribeOption{bus.WithMiddleware(mw)}, tt.opts...)
			_, err := topic.Subscribe(ctx, b, func(ctx context.Context, v orderPaid, d *bus.Delivery) error {
				handled.Add(1)
				got <- v
				if d.Outcome() == bus.OutcomePending {
					return d.Ack(ctx)
				}
				return nil
			}, opts...)
			require.NoError(t, err)

			require.NoError(t, b.Publish(ctx, "orders.paid", &bus.Message{ID: "bad", Key: "k", Payload: []byte(`{"order_id":`)}))
			require.NoError(t, topic.Publish(ctx, b, orderPaid{"o-2", 2}, bus.WithKey("k")))

			dl := recvWhat(t, dlq, "the dead letter")
			assert.Equal(t, "bad", dl.ID, "the undecodable message is dead-lettered")
			assert.Equal(t, string(bus.CodeUndecodable), dl.Headers[bus.HeaderDeadLetterCode], "its code")
			assert.Contains(t, dl.Headers[bus.HeaderDeadLetterReason], "unexpected end of JSON input", "the decode error is in the reason")
			assert.Equal(t, "o-2", recvWhat(t, got, "the next message").OrderID, "the next message is handled")
			assert.Equal(t, int32(1), handled.Load(), "the handler ran only for the decodable message")
			assert.Equal(t, int32(1), middleware.Load(), "the middleware ran only for the decodable message")
		})
	}
}

func TestTypedRefusesContentTypeItsCodecDoesNotRead(t *testing.T) {
	ctx := context.Background()
	b := openMem(t)
	topic := bus.NewTopic[orderPaid]("orders.paid")
	dlq := collectDLQ(t, b, "orders.paid.dlq")
	got := make(chan orderPaid, 4)
	_, err := topic.Subscribe(ctx, b, func(_ context.Context, v orderPaid, _ *bus.Delivery) error {
		got <- v
		return nil
	})
	require.NoError(t, err)

	require.NoError(t, b.Publish(ctx, "orders.paid",
		&bus.Message{ID: "xml", Headers: map[string]string{bus.HeaderContentType: "application/xml"}, Payload: []byte(`{"order_id":"x"}`)},
		&bus.Message{ID: "json-params", Headers: map[string]string{bus.HeaderContentType: "application/json; charset=utf-8"}, Payload: []byte(`{"order_id":"p"}`)},
		&bus.Message{ID: "none", Payload: []byte(`{"order_id":"n"}`)},
		&bus.Message{ID: "suffix", Headers: map[string]string{bus.HeaderContentType: "application/vnd.orders+json"}, Payload: []byte(`{"order_id":"s"}`)},
		&bus.Message{ID: "structured", Headers: map[string]string{bus.HeaderContentType: "application/cloudevents+json"}, Payload: []byte(`{"specversion":"1.0","data":{"order_id":"c"}}`)},
	))
	refused := map[string]string{}
	for range 2 {
		dl := recvWhat(t, dlq, "a dead letter")
		assert.Equal(t, string(bus.CodeUndecodable), dl.Headers[bus.HeaderDeadLetterCode], "%s: its code", dl.ID)
		refused[dl.ID] = dl.Headers[bus.HeaderDeadLetterReason]
	}
	assert.Contains(t, refused["xml"], `"application/xml"`, "a content type JSON does not read is refused, and named")
	assert.Contains(t, refused["structured"], `"application/cloudevents+json"`, "a structured-mode CloudEvent is refused")
	ids := []string{recvWhat(t, got, "first").OrderID, recvWhat(t, got, "second").OrderID, recvWhat(t, got, "third").OrderID}
	assert.ElementsMatch(t, []string{"p", "n", "s"}, ids, "JSON with parameters, +json and no content type are read")
}

func TestTypedUndecodableCountsInLifecycleEventsAndObserver(t *testing.T) {
	ctx := context.Background()
	var codes []string
	codeCh := make(chan string, 4)
	b := openMem(t, bus.WithObserver(observer.Func(func(_ context.Context, e observer.Event) {
		if e.Scope == observer.ScopeDeadLetter {
			codeCh <- e.Code
		}
	})))
	topic := bus.NewTopic[orderPaid]("orders.paid")
	_, err := topic.Subscribe(ctx, b, func(context.Context, orderPaid, *bus.Delivery) error {
		t.Error("the handler must not run")
		return nil
	})
	require.NoError(t, err)
	require.NoError(t, b.Publish(ctx, "orders.paid", &bus.Message{Payload: []byte("not json")}))
	codes = append(codes, recvWhat(t, codeCh, "the observer's dead-letter event"))
	assert.Equal(t, []string{string(bus.CodeUndecodable)}, codes, "the observer gets code undecodable")
}

func TestTypedHandlerDecodesOnTheUntypedPath(t *testing.T) {
	topic := bus.NewTopic[orderPaid]("orders.paid")
	var got orderPaid
	h := topic.Handler(func(_ context.Context, v orderPaid, _ *bus.Delivery) error {
		got = v
		return nil
	})
	m, err := topic.Message(orderPaid{"o-1", 5})
	require.NoError(t, err)
	res := bustest.Run(t, h, m)
	require.Equal(t, bus.OutcomeAcked, res.Outcome, res.String())
	assert.Equal(t, orderPaid{"o-1", 5}, got, "the handler gets the decoded value")

	res = bustest.Run(t, h, &bus.Message{Payload: []byte("{")})
	assert.Equal(t, bus.OutcomeDeadLettered, res.Outcome, res.String())
	assert.Equal(t, bus.CodeUndecodable, res.Code, "code undecodable")
}

func TestTypedRefusesBadInputBeforeIO(t *testing.T) {
	ctx := context.Background()
	b := openMem(t)
	h := func(context.Context, orderPaid, *bus.Delivery) error { return nil }
	bad := bus.NewTopic[orderPaid]("orders paid")
	assert.ErrorIs(t, bad.Publish(ctx, b, orderPaid{}), bus.ErrInvalidTopic, "invalid name on publish")
	_, err := bad.Subscribe(ctx, b, h)
	assert.ErrorIs(t, err, bus.ErrInvalidTopic, "invalid name on subscribe")
	assert.ErrorIs(t, bus.NewTopic[orderPaid]("t", bus.WithCodec(nil)).Publish(ctx, b, orderPaid{}), bus.ErrInvalidOption, "nil codec")
	assert.ErrorIs(t, bus.NewTopic[orderPaid]("t", bus.WithEventType("")).Publish(ctx, b, orderPaid{}), bus.ErrInvalidOption, "empty event type")
	ok := bus.NewTopic[orderPaid]("t")
	_, err = ok.Subscribe(ctx, b, nil)
	assert.ErrorIs(t, err, bus.ErrInvalidOption, "nil handler")

	ch := bus.NewTopic[chan int]("t")
	err = ch.Publish(ctx, b, make(chan int))
	assert.ErrorIs(t, err, bus.ErrInvalidMessage, "a value JSON cannot encode")
	err = ch.PublishAsync(ctx, b, make(chan int)).Get(ctx)
	assert.ErrorIs(t, err, bus.ErrInvalidMessage, "a value JSON cannot encode, async")
	assert.ErrorIs(t, ok.Publish(ctx, b, orderPaid{}, bus.WithHeader("bus-x", "1")), bus.ErrInvalidMessage, "a reserved header")
}

type renamed struct{}

func (renamed) EventType() string { return "com.example.renamed.v1" }

func TestTypedEventTypeComesFromOptionMethodOrGoName(t *testing.T) {
	assert.Equal(t, "orderPaid", bus.NewTopic[orderPaid]("t").EventType(), "the Go type name")
	assert.Equal(t, "com.example.renamed.v1", bus.NewTopic[renamed]("t").EventType(), "EventTyper")
	assert.Equal(t, "x.y", bus.NewTopic[renamed]("t", bus.WithEventType("x.y")).EventType(), "WithEventType wins")
}

func TestRawCodecCarriesBytes(t *testing.T) {
	ctx := context.Background()
	b := openMem(t)
	topic := bus.NewTopic[[]byte]("raw", bus.WithCodec(bus.Raw()))
	got := make(chan []byte, 1)
	_, err := topic.Subscribe(ctx, b, func(_ context.Context, v []byte, d *bus.Delivery) error {
		got <- v
		return nil
	})
	require.NoError(t, err)
	require.NoError(t, topic.Publish(ctx, b, []byte{0, 1, 2, 0xff}))
	assert.Equal(t, []byte{0, 1, 2, 0xff}, recvWhat(t, got, "raw bytes"), "bytes arrive as they are")

	_, err = bus.Raw().Encode(42)
	assert.Error(t, err, "raw refuses a non-bytes value")
	var s string
	require.NoError(t, bus.Raw().Decode([]byte("hi"), &s))
	assert.Equal(t, "hi", s, "raw decodes into a string")
}

func TestTypedTopicWorksThroughAWrappingPublisher(t *testing.T) {
	ctx := context.Background()
	b := openMem(t)
	var wrapped atomic.Int32
	p := publisherFunc(func(ctx context.Context, topic string, msgs ...*bus.Message) error {
		wrapped.Add(1)
		return b.Publish(ctx, topic, msgs...)
	})
	topic := bus.NewTopic[orderPaid]("orders.paid")
	require.NoError(t, topic.Publish(ctx, p, orderPaid{"o", 1}))
	assert.Equal(t, int32(1), wrapped.Load(), "the publish went through the wrapper")
	err := topic.Publish(ctx, nil, orderPaid{})
	assert.True(t, errors.Is(err, bus.ErrInvalidOption), fmt.Sprint("nil publisher: ", err))
}

type publisherFunc func(ctx context.Context, topic string, msgs ...*bus.Message) error

func (f publisherFunc) Publish(ctx context.Context, topic string, msgs ...*bus.Message) error {
	return f(ctx, topic, msgs...)
}

// The JSON column of docs/typed-events.md's schema evolution table.
func TestJSONSchemaEvolution(t *testing.T) {
	type v1 struct {
		OrderID string `json:"order_id"`
		Cents   int64  `json:"cents"`
	}
	type v2 struct {
		OrderID  string `json:"order_id"`
		Cents    int64  `json:"cents"`
		Currency string `json:"currency"`
	}
	type v3 struct {
		OrderID string `json:"order_id"`
		Cents   string `json:"cents"`
	}
	ctx := context.Background()
	b := openMem(t)
	dlq := collectDLQ(t, b, "orders.dlq")
	old := bus.NewTopic[v1]("orders", bus.WithEventType("order.paid"))
	added := bus.NewTopic[v2]("orders", bus.WithEventType("order.paid"))
	changed := bus.NewTopic[v3]("orders", bus.WithEventType("order.paid"))
	got := make(chan v1, 4)
	_, err := old.Subscribe(ctx, b, func(_ context.Context, v v1, _ *bus.Delivery) error {
		got <- v
		return nil
	})
	require.NoError(t, err)
	require.NoError(t, added.Publish(ctx, b, v2{"o-1", 5, "EUR"}))
	assert.Equal(t, v1{"o-1", 5}, recvWhat(t, got, "an event with an added field"), "an old consumer ignores an added field")

	newer, err := added.Decode(&bus.Delivery{Message: bus.Message{Payload: []byte(`{"order_id":"o-2","cents":7}`)}})
	require.NoError(t, err)
	assert.Equal(t, v2{"o-2", 7, ""}, newer, "a new consumer reading an old event gets the zero value")

	require.NoError(t, changed.Publish(ctx, b, v3{"o-3", "seven"}, bus.WithID("changed")))
	dl := recvWhat(t, dlq, "the event whose field changed type")
	assert.Equal(t, "changed", dl.ID, "dead-lettered")
	assert.Equal(t, string(bus.CodeUndecodable), dl.Headers[bus.HeaderDeadLetterCode], "undecodable")
}
