package watermill

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/testkit/kafkatest"
	"github.com/eventbus-go/bus/internal/testkit/natstest"
	"github.com/eventbus-go/bus/internal/testkit/pgtest"
	"github.com/eventbus-go/bus/internal/testkit/rabbittest"
	"github.com/eventbus-go/bus/internal/testkit/redistest"
	_ "github.com/eventbus-go/bus/kafka"
	_ "github.com/eventbus-go/bus/nats"
	"github.com/eventbus-go/bus/observer"
	_ "github.com/eventbus-go/bus/postgres"
	_ "github.com/eventbus-go/bus/rabbitmq"
	_ "github.com/eventbus-go/bus/redisstream"
)

// backends are the URLs Watermill's universal suite runs on, each a
// private server started for the test. A backend is one line here (and
// the import that registers its scheme).
var backends = []struct {
	name string
	url  func(t *testing.T) string
}{
	{"mem", func(*testing.T) string { return "mem://" }},
	{"redis", func(t *testing.T) string { return redistest.Start(t).URL() }},
	{"nats", func(t *testing.T) string { return natstest.Start(t).URL() }},
	{"postgres", func(t *testing.T) string { return pgtest.Start(t).URL() }},
	{"rabbitmq", func(t *testing.T) string { return rabbittest.Start(t).URL() }},
	{"kafka", func(t *testing.T) string { return kafkatest.Start(t).URL() }},
}

// features are what the adapter offers on every backend, for Watermill's
// universal suite. The tests it skips, and why:
//   - TestPublishSubscribeInOrder and TestNoAck need GuaranteedOrder:
//     several members of a group share its messages without an order
//     (bus.WithKeyOrdering orders them per Key across members; the
//     suite's messages have no Key). One member with MaxInFlight 1
//     keeps the order (GuaranteedOrderWithSingleSubscriber), which
//     TestKeyOrderingHoldsAcrossSubscribers and
//     TestSingleSubscriberKeepsPublishOrder check here.
//   - TestNewSubscriberReceivesOldMessages: a group resumes where it
//     stands, so a new member of it does not read what the group
//     settled.
//   - TestReconnect needs a command that restarts the broker; the bus's
//     own fault suites (internal/testkit/faultproxy) cut and restore the
//     connections of every backend.
//
// ForceShort runs the suite's short message counts, so that the suite
// stays within seconds under -race on every backend; BUS_WATERMILL_FULL=1
// runs its full counts (minutes).
func features() tests.Features {
	return tests.Features{
		ConsumerGroups:                      true,
		ExactlyOnceDelivery:                 false,
		GuaranteedOrder:                     false,
		GuaranteedOrderWithSingleSubscriber: true,
		Persistent:                          true,
		RequireSingleInstance:               false,
		NewSubscriberReceivesOldMessages:    false,
		ForceShort:                          os.Getenv("BUS_WATERMILL_FULL") == "",
	}
}

func TestWatermillUniversalSuite(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			b := openBus(t, be.url(t))
			tests.TestPubSub(t, features(),
				func(t *testing.T) (message.Publisher, message.Subscriber) {
					return newPubSub(t, b, "")
				},
				func(t *testing.T, group string) (message.Publisher, message.Subscriber) {
					return newPubSub(t, b, group)
				},
			)
		})
	}
}

// openBus opens a bus on url that the test closes when it ends.
func openBus(t *testing.T, url string) *bus.Bus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := bus.Open(ctx, url, bus.WithObserver(observer.Nop()))
	require.NoError(t, err, "open %s", url)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, b.Close(ctx), "close the bus")
	})
	return b
}

// newPubSub returns a Publisher and a Subscriber of group over b, with a
// close timeout short enough for the suite's TestMessageCtx (which waits
// 15 s for an unsettled message's context to end after Close).
func newPubSub(t *testing.T, b *bus.Bus, group string) (*Publisher, *Subscriber) {
	pub, err := NewPublisher(b, PublisherConfig{})
	require.NoError(t, err)
	sub, err := NewSubscriber(b, SubscriberConfig{
		Group:        group,
		CloseTimeout: 2 * time.Second,
	})
	require.NoError(t, err)
	return pub, sub
}
