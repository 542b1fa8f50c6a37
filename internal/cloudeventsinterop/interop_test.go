package cloudeventsinterop

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/eventbus-go/bus"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The values below are visible ASCII without '%': the SDK writes and
// reads HTTP header values as they are, where the binding (1.0.2) and
// bus percent-encode a space, a double quote, a '%' and every non-ASCII
// byte, so values with those differ between the two (docs/typed-events.md
// says so).

type orderPaid struct {
	OrderID string `json:"order_id"`
	Cents   int64  `json:"cents"`
}

var paidTopic = bus.NewTopic[orderPaid]("orders.paid",
	bus.WithEventType("com.example.order.paid"),
	bus.WithCloudEvents(bus.CloudEvents{Binding: bus.CloudEventsHTTP, Source: "/orders/api"}))

func openMem(t *testing.T) *bus.Bus {
	t.Helper()
	b, err := bus.Open(context.Background(), "mem://")
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		assert.NoError(t, b.Close(ctx))
	})
	return b
}

func recv[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// An event the SDK writes as an HTTP request in binary mode, carried by
// the bus with the request's headers and body, is read by a typed
// subscription: the data decoded, the id as the message ID, the type and
// the other attributes as the SDK wrote them.
func TestSDKEventIsReadByATypedSubscription(t *testing.T) {
	ctx := context.Background()
	ev := cloudevents.NewEvent()
	ev.SetID("ev-1")
	ev.SetSource("/billing/service")
	ev.SetType("com.example.order.paid")
	ev.SetTime(time.Date(2026, 11, 27, 6, 30, 0, 123_000_000, time.UTC))
	ev.SetSubject("order/o-42")
	require.NoError(t, ev.SetData(cloudevents.ApplicationJSON, orderPaid{OrderID: "o-42", Cents: 1250}))

	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://127.0.0.1/", nil)
	require.NoError(t, err)
	require.NoError(t, cehttp.WriteRequest(ctx, binding.ToMessage(&ev), req))
	body, err := io.ReadAll(req.Body)
	require.NoError(t, err)
	headers := map[string]string{}
	for k, vs := range req.Header {
		require.Len(t, vs, 1, "header %s", k)
		headers[k] = vs[0]
	}
	assert.Contains(t, headers, "Ce-Id", "the SDK wrote binary mode")

	b := openMem(t)
	type got struct {
		v orderPaid
		d *bus.Delivery
	}
	deliveries := make(chan got, 1)
	_, err = paidTopic.Subscribe(ctx, b, func(_ context.Context, v orderPaid, d *bus.Delivery) error {
		deliveries <- got{v, d}
		return nil
	}, bus.WithGroup("billing"))
	require.NoError(t, err)
	require.NoError(t, b.Publish(ctx, paidTopic.Name(), &bus.Message{ID: ev.ID(), Headers: headers, Payload: body}))

	g := recv(t, deliveries, "the SDK's event")
	assert.Equal(t, orderPaid{OrderID: "o-42", Cents: 1250}, g.v, "the data decoded")
	assert.Equal(t, "ev-1", g.d.ID)
	for attr, want := range map[string]string{
		"id": "ev-1", "source": "/billing/service", "type": "com.example.order.paid",
		"specversion": "1.0", "subject": "order/o-42", "time": "2026-11-27T06:30:00.123Z",
	} {
		v, ok := bus.CloudEventsHTTP.Attribute(g.d.Headers, attr)
		assert.True(t, ok, "attribute %s is there", attr)
		assert.Equal(t, want, v, "attribute %s", attr)
	}
}

// An event a typed topic publishes, handed to the SDK as an HTTP request
// with the delivery's headers and payload, is a valid CloudEvent to the
// SDK with the topic's attributes and the data.
func TestTypedTopicEventIsReadByTheSDK(t *testing.T) {
	ctx := context.Background()
	b := openMem(t)
	raw := make(chan *bus.Delivery, 1)
	_, err := b.Subscribe(ctx, paidTopic.Name(), func(_ context.Context, d *bus.Delivery) error {
		raw <- d
		return nil
	}, bus.WithGroup("raw"))
	require.NoError(t, err)
	before := time.Now().Add(-time.Second)
	require.NoError(t, paidTopic.Publish(ctx, b, orderPaid{OrderID: "o-7", Cents: 99}, bus.WithID("m-1/x")))
	d := recv(t, raw, "the published event")

	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://127.0.0.1/", bytes.NewReader(d.Payload))
	require.NoError(t, err)
	for k, v := range d.Headers {
		if strings.HasPrefix(strings.ToLower(k), "ce-") || strings.EqualFold(k, "content-type") {
			req.Header.Set(k, v)
		}
	}
	msg := cehttp.NewMessageFromHttpRequest(req)
	assert.Equal(t, binding.EncodingBinary, msg.ReadEncoding(), "binary content mode")
	ev, err := binding.ToEvent(ctx, msg)
	require.NoError(t, err)
	require.NoError(t, ev.Validate())
	assert.Equal(t, "m-1/x", ev.ID())
	assert.Equal(t, "/orders/api", ev.Source())
	assert.Equal(t, "com.example.order.paid", ev.Type())
	assert.Equal(t, "1.0", ev.SpecVersion())
	assert.Equal(t, "application/json", ev.DataContentType())
	assert.WithinRange(t, ev.Time(), before, time.Now().Add(time.Second), "time is the publish time")
	var v orderPaid
	require.NoError(t, ev.DataAs(&v))
	assert.Equal(t, orderPaid{OrderID: "o-7", Cents: 99}, v)
}
