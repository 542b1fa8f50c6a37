package middleware

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
)

func TestCorrelationIDFlowsFromConsumedToPublishedMessages(t *testing.T) {
	tests := []struct {
		name    string
		headers map[string]string
		msgID   string
		want    string
	}{
		{name: "header of the consumed message", headers: map[string]string{HeaderCorrelationID: "c-1"}, msgID: "m-1", want: "c-1"},
		{name: "message ID starts a correlation", msgID: "m-2", want: "m-2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := testBus(t, bus.WithMiddleware(CorrelationID()), bus.WithPublishMiddleware(CorrelationIDPublish()))
			got := make(chan [2]string, 1)
			subscribe(t, b, "in", func(ctx context.Context, d *bus.Delivery) error {
				return b.Publish(ctx, "out", &bus.Message{})
			})
			subscribe(t, b, "out", func(ctx context.Context, d *bus.Delivery) error {
				id, _ := CorrelationIDFrom(ctx)
				got <- [2]string{d.Headers[HeaderCorrelationID], id}
				return nil
			})
			publish(t, b, "in", &bus.Message{ID: tt.msgID, Headers: tt.headers})
			select {
			case g := <-got:
				assert.Equal(t, tt.want, g[0], "header of the message published by the handler")
				assert.Equal(t, tt.want, g[1], "correlation ID in the downstream handler ctx")
			case <-time.After(5 * time.Second):
				t.Fatal("downstream message not delivered")
			}
		})
	}
}

func TestCorrelationIDPublishDoesNotModifyCallerMessages(t *testing.T) {
	orig := &bus.Message{ID: "m-1", Headers: map[string]string{"a": "1"}}
	keep := &bus.Message{ID: "m-2", Headers: map[string]string{HeaderCorrelationID: "own"}}
	var sent []*bus.Message
	pub := CorrelationIDPublish()(PublishFunc(func(ctx context.Context, topic string, msgs ...*bus.Message) error {
		sent = msgs
		return nil
	}))
	in := []*bus.Message{orig, keep}
	require.NoError(t, pub.Publish(WithCorrelationID(context.Background(), "c-9"), "t", in...))

	require.Len(t, sent, 2)
	assert.Equal(t, "c-9", sent[0].Headers[HeaderCorrelationID], "the ctx's ID is added")
	assert.Equal(t, "1", sent[0].Headers["a"], "other headers kept")
	assert.Equal(t, "own", sent[1].Headers[HeaderCorrelationID], "an explicit correlation ID wins")
	assert.NotContains(t, orig.Headers, HeaderCorrelationID, "the caller's message is unchanged")
	assert.Same(t, orig, in[0], "the caller's slice is unchanged")
}

func TestCorrelationIDPublishPassesThroughWithoutID(t *testing.T) {
	m := &bus.Message{ID: "m-1"}
	pub := CorrelationIDPublish()(PublishFunc(func(ctx context.Context, topic string, msgs ...*bus.Message) error {
		assert.Same(t, m, msgs[0], "no ID in ctx: message passes unchanged")
		return nil
	}))
	require.NoError(t, pub.Publish(context.Background(), "t", []*bus.Message{m}...))
}
