package sqs_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/testkit/awstest"
	_ "github.com/eventbus-go/bus/sqs"
)

// TestOpenRegistersTheScheme opens an sqs:// URL through bus.Open and
// sends one message through SNS to a group's queue.
func TestOpenRegistersTheScheme(t *testing.T) {
	awstest.SetDummyCredentials(t)
	srv := awstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := bus.Open(ctx, srv.URL()+"&prefix=open-&close_timeout=3s")
	require.NoError(t, err, "bus.Open opens sqs:// URLs")
	defer func() { require.NoError(t, b.Close(context.Background())) }()
	got := make(chan string, 1)
	sub, err := b.Subscribe(ctx, "orders.created", func(ctx context.Context, d *bus.Delivery) error {
		select {
		case got <- string(d.Payload):
		default:
		}
		return nil
	}, bus.WithGroup("billing"))
	require.NoError(t, err)
	defer func() { require.NoError(t, sub.Close(context.Background())) }()
	require.NoError(t, b.Publish(ctx, "orders.created", &bus.Message{Payload: []byte("order 1")}))
	select {
	case p := <-got:
		require.Equal(t, "order 1", p, "the payload arrives")
	case <-ctx.Done():
		t.Fatal("the message did not arrive within 30s")
	}
}
