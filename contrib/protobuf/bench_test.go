package protobuf_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/contrib/protobuf"
)

// sampleOrder is an event of about 256 bytes in the wire format.
func sampleOrder() *structpb.Struct {
	s, err := structpb.NewStruct(map[string]any{
		"id": "order-1", "customer": "customer-7", "cents": 125000, "currency": "EUR",
		"items": []any{"sku-1001", "sku-1002", "sku-1003"}, "note": strings.Repeat("n", 120),
	})
	if err != nil {
		panic(err)
	}
	return s
}

// BenchmarkPublish publishes one message per call over a backend that
// stores nothing, untyped with
// proto.Marshal by hand and typed (Topic.Publish with the codec): the
// typed layer's cost beside the codec's. internal/bench's
// BenchmarkTypedPublish does the same for JSON.
func BenchmarkPublish(b *testing.B) {
	ctx := context.Background()
	ev := sampleOrder()
	b.Run("untyped-proto", func(b *testing.B) {
		bs := openBench(b)
		b.ReportAllocs()
		for b.Loop() {
			p, err := proto.Marshal(ev)
			if err != nil {
				b.Fatal(err)
			}
			if err := bs.Publish(ctx, "bench", &bus.Message{Payload: p, Headers: map[string]string{bus.HeaderContentType: protobuf.ContentType}}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("typed-proto", func(b *testing.B) {
		bs := openBench(b)
		topic := bus.NewTopic[*structpb.Struct]("bench", bus.WithCodec(protobuf.Codec()))
		b.ReportAllocs()
		for b.Loop() {
			if err := topic.Publish(ctx, bs, ev); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkDecode decodes one delivery per call: proto.Unmarshal by hand
// and Topic.Decode.
func BenchmarkDecode(b *testing.B) {
	topic := bus.NewTopic[*structpb.Struct]("bench", bus.WithCodec(protobuf.Codec()))
	m, err := topic.Message(sampleOrder())
	if err != nil {
		b.Fatal(err)
	}
	d := &bus.Delivery{Message: *m}
	b.Run("untyped-proto", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var v structpb.Struct
			if err := proto.Unmarshal(d.Payload, &v); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("typed-proto", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := topic.Decode(d); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func openBench(b *testing.B) *bus.Bus {
	b.Helper()
	bs := bus.New(nopBackend{})
	b.Cleanup(func() { _ = bs.Close(context.Background()) })
	return bs
}

// nopBackend stores nothing, so that a publish benchmark measures the
// bus and the codec alone.
type nopBackend struct{}

func (nopBackend) Publish(context.Context, string, []*backend.Message) error { return nil }
func (nopBackend) Subscribe(context.Context, string, backend.SubscribeConfig) (backend.Subscription, error) {
	return nil, bus.ErrUnsupported
}
func (nopBackend) Capabilities() bus.Capabilities { return bus.Capabilities{Name: "nop"} }
func (nopBackend) Close() error                   { return nil }
