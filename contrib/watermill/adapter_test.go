package watermill

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/components/delay"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/cenkalti/backoff/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/testkit/rabbittest"
)

const wait = 10 * time.Second

// fastRetry retries at once, for tests that nack many times.
func fastRetry() backoff.BackOff { return backoff.NewConstantBackOff(time.Millisecond) }

// next receives one message from ch, failing the test after wait.
func next(t *testing.T, ch <-chan *message.Message) *message.Message {
	t.Helper()
	select {
	case msg, ok := <-ch:
		require.True(t, ok, "the channel is open")
		return msg
	case <-time.After(wait):
		t.Fatalf("no message within %v", wait)
		return nil
	}
}

// none fails the test when ch yields a message within d.
func none(t *testing.T, ch <-chan *message.Message, d time.Duration, why string) {
	t.Helper()
	select {
	case msg, ok := <-ch:
		if ok {
			t.Fatalf("%s: got message %q", why, msg.UUID)
		}
	case <-time.After(d):
	}
}

func newSub(t *testing.T, b *bus.Bus, cfg SubscriberConfig) *Subscriber {
	t.Helper()
	sub, err := NewSubscriber(b, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, sub.Close(), "close the subscriber") })
	return sub
}

func publish(t *testing.T, b *bus.Bus, topic string, msgs ...*message.Message) {
	t.Helper()
	pub, err := NewPublisher(b, PublisherConfig{KeyMetadata: "key"})
	require.NoError(t, err)
	require.NoError(t, pub.Publish(topic, msgs...))
}

func TestNackRetriesThenDeadLetters(t *testing.T) {
	b := openBus(t, "mem://")
	sub := newSub(t, b, SubscriberConfig{MaxDeliveries: 3, Options: []bus.SubscribeOption{bus.WithRetryBackoff(fastRetry)}})
	msg := message.NewMessage("poison-1", []byte("p"))
	msg.Metadata.Set("m", "v")
	publish(t, b, "orders", msg)

	ch, err := sub.Subscribe(context.Background(), "orders")
	require.NoError(t, err)
	for range 3 {
		got := next(t, ch)
		assert.Equal(t, "poison-1", got.UUID)
		got.Nack()
	}
	none(t, ch, 200*time.Millisecond, "no fourth delivery after max deliveries 3")

	dl, err := sub.Subscribe(context.Background(), "orders.dlq")
	require.NoError(t, err)
	got := next(t, dl)
	assert.Equal(t, "poison-1", got.UUID, "the dead letter keeps the UUID")
	assert.Equal(t, "p", string(got.Payload))
	assert.Equal(t, "v", got.Metadata.Get("m"), "the dead letter keeps the metadata")
	assert.Equal(t, string(bus.CodeMaxDeliveries), got.Metadata.Get(bus.HeaderDeadLetterCode), "the dead letter says why")
	got.Ack()
}

func TestUnlimitedRetriesPastTheBusDefault(t *testing.T) {
	b := openBus(t, "mem://")
	sub := newSub(t, b, SubscriberConfig{MaxDeliveries: Unlimited, Options: []bus.SubscribeOption{bus.WithRetryBackoff(fastRetry)}})
	publish(t, b, "orders", message.NewMessage("m1", nil))
	ch, err := sub.Subscribe(context.Background(), "orders")
	require.NoError(t, err)
	for range 25 {
		next(t, ch).Nack()
	}
	got := next(t, ch)
	assert.Equal(t, "m1", got.UUID, "delivered again after 25 nacks (the bus's default limit is 10)")
	got.Ack()
	groups, err := b.Groups(context.Background(), "orders.dlq")
	if err == nil {
		assert.Empty(t, groups, "nothing was dead-lettered")
	}
}

func TestCloseWaitsForHandedOutMessages(t *testing.T) {
	b := openBus(t, "mem://")
	sub, err := NewSubscriber(b, SubscriberConfig{})
	require.NoError(t, err)
	publish(t, b, "orders", message.NewMessage("m1", nil), message.NewMessage("m2", nil))
	ch, err := sub.Subscribe(context.Background(), "orders")
	require.NoError(t, err)
	got := next(t, ch)

	closed := make(chan error, 1)
	go func() { closed <- sub.Close() }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) before the handed-out message was acked", err)
	case <-time.After(200 * time.Millisecond):
	}
	require.True(t, got.Ack())
	select {
	case err := <-closed:
		require.NoError(t, err, "Close drains cleanly")
	case <-time.After(wait):
		t.Fatal("Close did not return after the ack")
	}
	_, open := <-ch
	assert.False(t, open, "Close closes the channel")
	_, err = sub.Subscribe(context.Background(), "orders")
	require.ErrorIs(t, err, ErrClosed)

	again := newSub(t, b, SubscriberConfig{})
	ch, err = again.Subscribe(context.Background(), "orders")
	require.NoError(t, err)
	rest := next(t, ch)
	assert.Equal(t, "m2", rest.UUID, "the acked message is settled; the one not handed out comes next")
	rest.Ack()
	none(t, ch, 200*time.Millisecond, "nothing more")
}

func TestCloseTimeoutGivesUnsettledMessagesBack(t *testing.T) {
	b := openBus(t, "mem://")
	sub, err := NewSubscriber(b, SubscriberConfig{CloseTimeout: 300 * time.Millisecond})
	require.NoError(t, err)
	publish(t, b, "orders", message.NewMessage("m1", nil))
	ch, err := sub.Subscribe(context.Background(), "orders")
	require.NoError(t, err)
	got := next(t, ch)

	start := time.Now()
	require.NoError(t, sub.Close(), "an unsettled message at the close timeout is no error")
	assert.Less(t, time.Since(start), 3*time.Second, "Close returns by its timeout")
	select {
	case <-got.Context().Done():
	default:
		t.Fatal("the unsettled message's context ends when Close gives up")
	}

	again := newSub(t, b, SubscriberConfig{})
	ch, err = again.Subscribe(context.Background(), "orders")
	require.NoError(t, err)
	back := next(t, ch)
	assert.Equal(t, "m1", back.UUID, "the unsettled message comes back to the group")
	back.Ack()
}

func TestSubscribeCtxEndClosesTheChannel(t *testing.T) {
	b := openBus(t, "mem://")
	sub := newSub(t, b, SubscriberConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := sub.Subscribe(ctx, "orders")
	require.NoError(t, err)
	cancel()
	select {
	case _, open := <-ch:
		assert.False(t, open, "no message was published")
	case <-time.After(wait):
		t.Fatal("the channel did not close after the Subscribe ctx ended")
	}
}

func TestSingleSubscriberKeepsPublishOrder(t *testing.T) {
	b := openBus(t, "mem://")
	var msgs []*message.Message
	for i := range 100 {
		msgs = append(msgs, message.NewMessage(fmt.Sprintf("m%03d", i), nil))
	}
	publish(t, b, "orders", msgs...)
	sub := newSub(t, b, SubscriberConfig{})
	ch, err := sub.Subscribe(context.Background(), "orders")
	require.NoError(t, err)
	for i := range 100 {
		got := next(t, ch)
		require.Equal(t, fmt.Sprintf("m%03d", i), got.UUID, "publish order")
		got.Ack()
	}
}

func TestKeyOrderingHoldsAcrossSubscribers(t *testing.T) {
	b := openBus(t, "mem://")
	const keys, perKey = 4, 25
	var msgs []*message.Message
	for i := range perKey {
		for k := range keys {
			msg := message.NewMessage(fmt.Sprintf("k%d-%03d", k, i), nil)
			msg.Metadata.Set("key", fmt.Sprint(k))
			msgs = append(msgs, msg)
		}
	}
	publish(t, b, "orders", msgs...)

	var mu sync.Mutex
	seen := map[string][]string{}
	all := make(chan struct{})
	cfg := SubscriberConfig{Group: "g", KeyOrdering: true, MaxInFlight: 8}
	for range 3 {
		ch, err := newSub(t, b, cfg).Subscribe(context.Background(), "orders")
		require.NoError(t, err)
		go func() {
			for msg := range ch {
				mu.Lock()
				k := msg.Metadata.Get("key")
				seen[k] = append(seen[k], msg.UUID)
				n := 0
				for _, ids := range seen {
					n += len(ids)
				}
				mu.Unlock()
				msg.Ack()
				if n == keys*perKey {
					close(all)
				}
			}
		}()
	}
	select {
	case <-all:
	case <-time.After(wait):
		t.Fatal("not every message arrived")
	}
	mu.Lock()
	defer mu.Unlock()
	for k := range keys {
		var want []string
		for i := range perKey {
			want = append(want, fmt.Sprintf("k%d-%03d", k, i))
		}
		assert.Equal(t, want, seen[fmt.Sprint(k)], "key %d in publish order", k)
	}
}

func TestDelayMetadataHoldsTheMessageBack(t *testing.T) {
	b := openBus(t, "mem://")
	msg := message.NewMessage("later", nil)
	delay.Message(msg, delay.For(700*time.Millisecond))
	sent := time.Now()
	publish(t, b, "orders", msg)
	sub := newSub(t, b, SubscriberConfig{})
	ch, err := sub.Subscribe(context.Background(), "orders")
	require.NoError(t, err)
	got := next(t, ch)
	// The delay metadata holds whole seconds (RFC 3339), so the time is
	// at least the delay cut to the second before it.
	until, err := time.Parse(time.RFC3339, got.Metadata.Get(delay.DelayedUntilKey))
	require.NoError(t, err)
	assert.False(t, time.Now().Before(until), "not delivered before %v (sent %v)", until, sent)
	got.Ack()
}

func TestLimiterIsSharedAndLeaseIsKeptWhileUnsettled(t *testing.T) {
	b := openBus(t, "mem://")
	publish(t, b, "orders", message.NewMessage("m1", nil), message.NewMessage("m2", nil))
	lim := bus.NewConcurrencyLimiter(1)
	cfg := SubscriberConfig{Group: "g", MaxInFlight: 4, Options: []bus.SubscribeOption{
		bus.WithLimiter(lim), bus.WithAckTimeout(200 * time.Millisecond),
	}}
	ch1, err := newSub(t, b, cfg).Subscribe(context.Background(), "orders")
	require.NoError(t, err)
	ch2, err := newSub(t, b, cfg).Subscribe(context.Background(), "orders")
	require.NoError(t, err)

	var first *message.Message
	var other <-chan *message.Message
	select {
	case first = <-ch1:
		other = ch2
	case first = <-ch2:
		other = ch1
	case <-time.After(wait):
		t.Fatal("no message")
	}
	// Five ack timeouts pass: the lease is kept alive, and the shared
	// limiter lets no second message out.
	none(t, other, time.Second, "the limiter of 1 lets one message out, and the lease of the first holds")
	require.True(t, first.Ack())
	var second *message.Message
	select {
	case second = <-ch1:
	case second = <-ch2:
	case <-time.After(wait):
		t.Fatal("the second message did not come after the first was acked")
	}
	assert.NotEqual(t, first.UUID, second.UUID, "the first, acked, is not delivered again")
	second.Ack()
}

func TestAckModeOptionCannotTurnOffSettlement(t *testing.T) {
	b := openBus(t, "mem://")
	sub := newSub(t, b, SubscriberConfig{Options: []bus.SubscribeOption{bus.WithAckMode(bus.AckOnReceive)}})
	publish(t, b, "orders", message.NewMessage("m1", nil))
	ch, err := sub.Subscribe(context.Background(), "orders")
	require.NoError(t, err)
	next(t, ch).Nack()
	again := next(t, ch)
	assert.Equal(t, "m1", again.UUID, "a Nack redelivers: the Subscriber's ack mode wins")
	again.Ack()
}

func TestBadConfigIsRefused(t *testing.T) {
	b := openBus(t, "mem://")
	_, err := NewPublisher(nil, PublisherConfig{})
	assert.ErrorIs(t, err, bus.ErrInvalidOption)
	_, err = NewPublisher(b, PublisherConfig{PublishTimeout: -1})
	assert.ErrorIs(t, err, bus.ErrInvalidOption)
	for _, cfg := range []SubscriberConfig{{MaxInFlight: -1}, {MaxDeliveries: -2}, {CloseTimeout: -1}} {
		_, err = NewSubscriber(b, cfg)
		assert.ErrorIs(t, err, bus.ErrInvalidOption, "%+v", cfg)
	}
	_, err = NewSubscriber(nil, SubscriberConfig{})
	assert.ErrorIs(t, err, bus.ErrInvalidOption)

	sub := newSub(t, b, SubscriberConfig{Options: []bus.SubscribeOption{bus.WithMaxInFlight(0)}})
	_, err = sub.Subscribe(context.Background(), "orders")
	assert.ErrorIs(t, err, bus.ErrInvalidOption, "a bad bus option is refused at Subscribe")
	_, err = newSub(t, b, SubscriberConfig{}).Subscribe(context.Background(), "bad topic")
	assert.ErrorIs(t, err, bus.ErrInvalidTopic)

	pub, err := NewPublisher(b, PublisherConfig{})
	require.NoError(t, err)
	assert.ErrorIs(t, pub.Publish("orders", nil), bus.ErrInvalidMessage)
	require.NoError(t, pub.Close())
	assert.ErrorIs(t, pub.Publish("orders", message.NewMessage("m", nil)), ErrClosed)
}

// TestSubscribeOnABackendWithoutStartOldest: on RabbitMQ, which cannot
// start a group from the oldest message, Subscribe creates the group
// from now on instead of failing, and it gets what is published after.
func TestSubscribeOnABackendWithoutStartOldest(t *testing.T) {
	b := openBus(t, rabbittest.Start(t).URL())
	require.False(t, b.Capabilities().StartOldest)
	sub := newSub(t, b, SubscriberConfig{Group: "g"})
	ch, err := sub.Subscribe(context.Background(), "after")
	require.NoError(t, err, "Subscribe does not ask RabbitMQ for StartOldest")
	publish(t, b, "after", message.NewMessage("m1", []byte("x")))
	got := next(t, ch)
	require.Equal(t, "m1", got.UUID)
	got.Ack()
}
