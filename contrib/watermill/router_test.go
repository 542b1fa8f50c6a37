package watermill

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRouterWithPoisonQueue runs the router of docs/watermill.md on
// mem://: two handlers behind the Retry and poison-queue middleware.
func TestRouterWithPoisonQueue(t *testing.T) {
	b := openBus(t, "mem://")
	pub, err := NewPublisher(b, PublisherConfig{})
	require.NoError(t, err)
	sub, err := NewSubscriber(b, SubscriberConfig{Group: "billing"})
	require.NoError(t, err)
	poisonSub := newSub(t, b, SubscriberConfig{Group: "ops"})

	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, watermill.NopLogger{})
	require.NoError(t, err)
	poison, err := middleware.PoisonQueue(pub, "orders.poison")
	require.NoError(t, err)
	router.AddMiddleware(poison, middleware.Retry{MaxRetries: 2, InitialInterval: time.Millisecond}.Middleware)

	var mu sync.Mutex
	var billed int
	mailed := make(chan string, 10)
	router.AddHandler("bill", "orders", sub, "invoices", pub, func(msg *message.Message) ([]*message.Message, error) {
		mu.Lock()
		billed++
		mu.Unlock()
		if len(msg.Payload) == 0 {
			return nil, errors.New("empty order")
		}
		out := message.NewMessage("invoice-"+msg.UUID, msg.Payload)
		return []*message.Message{out}, nil
	})
	router.AddConsumerHandler("mail", "invoices", sub, func(msg *message.Message) error {
		mailed <- msg.UUID
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- router.Run(ctx) }()
	select {
	case <-router.Running():
	case <-time.After(wait):
		t.Fatal("the router did not start")
	}

	require.NoError(t, pub.Publish("orders", message.NewMessage("o1", []byte("ok")), message.NewMessage("o2", nil)))
	select {
	case id := <-mailed:
		assert.Equal(t, "invoice-o1", id, "the good order is billed and mailed")
	case <-time.After(wait):
		t.Fatal("no invoice mailed")
	}
	poisoned, err := poisonSub.Subscribe(context.Background(), "orders.poison")
	require.NoError(t, err)
	got := next(t, poisoned)
	assert.Equal(t, "o2", got.UUID, "the failing order goes to the poison queue")
	assert.Equal(t, "empty order", got.Metadata.Get(middleware.ReasonForPoisonedKey))
	got.Ack()
	mu.Lock()
	assert.Equal(t, 1+3, billed, "the good order once, the bad one 1+2 retries")
	mu.Unlock()

	require.NoError(t, router.Close())
	select {
	case err := <-ran:
		require.NoError(t, err)
	case <-time.After(wait):
		t.Fatal("the router did not stop")
	}
	require.NoError(t, sub.Close())
}
