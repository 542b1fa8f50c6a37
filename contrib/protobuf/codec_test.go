package protobuf_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/contrib/protobuf"
)

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

// subscribe subscribes h to topic on b and returns what it receives.
func subscribe[T any](t *testing.T, b *bus.Bus, topic *bus.Topic[T]) <-chan T {
	t.Helper()
	got := make(chan T, 16)
	_, err := topic.Subscribe(context.Background(), b, func(_ context.Context, v T, _ *bus.Delivery) error {
		got <- v
		return nil
	})
	require.NoError(t, err)
	return got
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

func TestRoundTripThroughATypedTopic(t *testing.T) {
	b := openMem(t)
	topic := bus.NewTopic[*timestamppb.Timestamp]("ticks", bus.WithCodec(protobuf.Codec()), bus.WithEventType("google.protobuf.Timestamp"))
	raw := make(chan *bus.Delivery, 1)
	_, err := b.Subscribe(context.Background(), "ticks", func(_ context.Context, d *bus.Delivery) error {
		raw <- d
		return nil
	}, bus.WithGroup("raw"))
	require.NoError(t, err)
	got := subscribe(t, b, topic)

	sent := &timestamppb.Timestamp{Seconds: 1_700_000_000, Nanos: 123}
	require.NoError(t, topic.Publish(context.Background(), b, sent))
	v := recv(t, got, "the typed delivery")
	assert.True(t, proto.Equal(sent, v), "the message arrives as sent: %v", v)
	d := recv(t, raw, "the raw delivery")
	assert.Equal(t, protobuf.ContentType, d.Headers[bus.HeaderContentType], "the content type travels")
	want, err := proto.Marshal(sent)
	require.NoError(t, err)
	assert.Equal(t, want, d.Payload, "the payload is the binary wire format")
}

// A typed subscription reads the other Protobuf media types and
// dead-letters a payload that is not the type's encoding, or of another
// content type, with code undecodable.
func TestContentTypesAndUndecodable(t *testing.T) {
	b := openMem(t)
	topic := bus.NewTopic[*wrapperspb.StringValue]("names", bus.WithCodec(protobuf.Codec()))
	dead := make(chan *bus.Delivery, 4)
	_, err := b.Subscribe(context.Background(), "names.dlq", func(_ context.Context, d *bus.Delivery) error {
		dead <- d
		return nil
	})
	require.NoError(t, err)
	got := subscribe(t, b, topic)
	payload, err := proto.Marshal(wrapperspb.String("ada"))
	require.NoError(t, err)
	ctx := context.Background()
	for _, ct := range []string{"application/x-protobuf", "application/vnd.google.protobuf", "Application/Protobuf; proto=google.protobuf.StringValue"} {
		require.NoError(t, b.Publish(ctx, "names", &bus.Message{Payload: payload, Headers: map[string]string{bus.HeaderContentType: ct}}))
		assert.Equal(t, "ada", recv(t, got, ct).GetValue(), "%s is read", ct)
	}
	require.NoError(t, b.Publish(ctx, "names", &bus.Message{ID: "json", Payload: []byte(`{"value":"ada"}`), Headers: map[string]string{bus.HeaderContentType: "application/json"}}))
	// Field 1 with wire type 7 (none such): not a valid encoding.
	require.NoError(t, b.Publish(ctx, "names", &bus.Message{ID: "garbage", Payload: []byte{0x0f, 0x01}, Headers: map[string]string{bus.HeaderContentType: protobuf.ContentType}}))
	// The two are handled concurrently: their dead letters come in
	// either order.
	var ids []string
	for range 2 {
		d := recv(t, dead, "a dead letter")
		ids = append(ids, d.ID)
		assert.Equal(t, string(bus.CodeUndecodable), d.Headers[bus.HeaderDeadLetterCode], "%s: its code", d.ID)
	}
	assert.ElementsMatch(t, []string{"json", "garbage"}, ids, "both are dead-lettered")
	assert.Empty(t, got, "neither reached the handler")
}

// Encoding a value of the wrong shape is an error, at Publish too, that
// names the type to declare.
func TestWrongTypesAreRefusedWithWhatToDeclare(t *testing.T) {
	c := protobuf.Codec()
	_, err := c.Encode(wrapperspb.StringValue{})
	assert.ErrorContains(t, err, "bus.NewTopic[*wrapperspb.StringValue]")
	_, err = c.Encode("text")
	assert.ErrorContains(t, err, "not a proto.Message")
	_, err = c.Encode((*wrapperspb.StringValue)(nil))
	assert.ErrorContains(t, err, "nil *wrapperspb.StringValue")
	var s string
	assert.ErrorContains(t, c.Decode([]byte{}, &s), "not a proto.Message")

	b := openMem(t)
	topic := bus.NewTopic[*wrapperspb.StringValue]("names", bus.WithCodec(c))
	err = topic.Publish(context.Background(), b, nil)
	assert.ErrorContains(t, err, "cannot encode a nil")
}

// Decode fills a message value through its pointer too (a Topic whose
// type is a message struct is refused at Encode, but a user's own code
// may call the codec so).
func TestDecodeFillsAMessagePointer(t *testing.T) {
	payload, err := proto.Marshal(wrapperspb.Int64(42))
	require.NoError(t, err)
	var v wrapperspb.Int64Value
	require.NoError(t, protobuf.Codec().Decode(payload, &v))
	assert.Equal(t, int64(42), v.GetValue())
}

// The Protobuf column of docs/typed-events.md's schema evolution table:
// Timestamp (seconds = 1, nanos = 2) plays a newer version of Int64Value
// (value = 1) with a field added.
func TestSchemaEvolution(t *testing.T) {
	c := protobuf.Codec()
	t.Run("add a field", func(t *testing.T) {
		newer, err := c.Encode(&timestamppb.Timestamp{Seconds: 7, Nanos: 9})
		require.NoError(t, err)
		var old *wrapperspb.Int64Value
		require.NoError(t, c.Decode(newer, &old), "an old consumer reads the newer event")
		assert.Equal(t, int64(7), old.GetValue(), "the fields it knows")
		again, err := c.Encode(old)
		require.NoError(t, err)
		var back *timestamppb.Timestamp
		require.NoError(t, c.Decode(again, &back))
		assert.Equal(t, int32(9), back.GetNanos(), "the added field is kept as unknown and passed on")
	})
	t.Run("new consumer of an old event", func(t *testing.T) {
		old, err := c.Encode(wrapperspb.Int64(7))
		require.NoError(t, err)
		var newer *timestamppb.Timestamp
		require.NoError(t, c.Decode(old, &newer))
		assert.Equal(t, int64(7), newer.GetSeconds())
		assert.Zero(t, newer.GetNanos(), "the missing field has its default")
	})
	t.Run("change a field's wire type", func(t *testing.T) {
		// Field 1 as a length-delimited string where Int64Value has a varint.
		payload := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "seven")
		var v *wrapperspb.Int64Value
		require.NoError(t, c.Decode(payload, &v), "a field of another wire type is kept as unknown")
		assert.Zero(t, v.GetValue(), "and is not read as the field")
	})
}
