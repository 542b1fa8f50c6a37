package watermill

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	wmamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	wmkafka "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	nc "github.com/nats-io/nats.go"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/testkit/awstest"
	"github.com/eventbus-go/bus/internal/testkit/kafkatest"
	"github.com/eventbus-go/bus/internal/testkit/natstest"
	"github.com/eventbus-go/bus/internal/testkit/rabbittest"
	"github.com/eventbus-go/bus/internal/testkit/redistest"
	"github.com/eventbus-go/bus/observer"
)

// benchBatch is how many messages one Publish call carries.
const benchBatch = 100

// BenchmarkRouter measures Watermill's router, one consumer handler that
// acks, over the adapter on mem://, Redis, NATS JetStream, RabbitMQ,
// Kafka and SNS+SQS (on the moto emulator) beside Watermill's own Redis
// Streams, NATS JetStream, AMQP and Kafka Pub/Subs and GoChannel, in one
// run, on private servers: msgs/s from the first Publish to the last
// message handled, 256-byte payloads published benchBatch to a call
// while the router consumes. Every Pub/Sub keeps its defaults (one
// message handed out at a time per subscription); the -inflight16 rows
// set SubscriberConfig.MaxInFlight to 16, which the router handles
// concurrently.
func BenchmarkRouter(b *testing.B) {
	redisURL := redistest.Start(b).URL()
	natsURL := natstest.Start(b).URL()
	amqpURL := rabbittest.Start(b).URL()
	kafkaNode := kafkatest.Start(b)
	awstest.SetDummyCredentials(b)
	sqsURL := awstest.Start(b).URL()
	peers := []struct {
		name string
		open func(b *testing.B) (message.Publisher, message.Subscriber)
	}{
		{"gochannel", func(*testing.B) (message.Publisher, message.Subscriber) {
			ps := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
			return ps, ps
		}},
		{"bus-mem", func(b *testing.B) (message.Publisher, message.Subscriber) { return benchBus(b, "mem://", 1) }},
		{"bus-mem-inflight16", func(b *testing.B) (message.Publisher, message.Subscriber) { return benchBus(b, "mem://", 16) }},
		{"bus-redis", func(b *testing.B) (message.Publisher, message.Subscriber) { return benchBus(b, redisURL, 1) }},
		{"bus-redis-inflight16", func(b *testing.B) (message.Publisher, message.Subscriber) { return benchBus(b, redisURL, 16) }},
		{"redisstream", func(b *testing.B) (message.Publisher, message.Subscriber) { return benchRedisstream(b, redisURL) }},
		{"bus-nats", func(b *testing.B) (message.Publisher, message.Subscriber) { return benchBus(b, natsURL, 1) }},
		{"bus-nats-inflight16", func(b *testing.B) (message.Publisher, message.Subscriber) { return benchBus(b, natsURL, 16) }},
		{"watermill-nats", func(b *testing.B) (message.Publisher, message.Subscriber) { return benchWatermillNATS(b, natsURL) }},
		{"bus-rabbitmq", func(b *testing.B) (message.Publisher, message.Subscriber) { return benchBus(b, amqpURL, 1) }},
		{"bus-rabbitmq-inflight16", func(b *testing.B) (message.Publisher, message.Subscriber) { return benchBus(b, amqpURL, 16) }},
		{"watermill-amqp", func(b *testing.B) (message.Publisher, message.Subscriber) { return benchWatermillAMQP(b, amqpURL) }},
		{"watermill-amqp-quorum", func(b *testing.B) (message.Publisher, message.Subscriber) {
			return benchWatermillAMQPQuorum(b, amqpURL)
		}},
		{"bus-kafka", func(b *testing.B) (message.Publisher, message.Subscriber) { return benchBus(b, kafkaNode.URL(), 1) }},
		{"bus-kafka-inflight16", func(b *testing.B) (message.Publisher, message.Subscriber) { return benchBus(b, kafkaNode.URL(), 16) }},
		{"watermill-kafka", func(b *testing.B) (message.Publisher, message.Subscriber) {
			return benchWatermillKafka(b, kafkaNode.Addr())
		}},
		{"bus-sqs-inflight16", func(b *testing.B) (message.Publisher, message.Subscriber) { return benchBus(b, sqsURL, 16) }},
	}
	for _, p := range peers {
		b.Run(p.name, func(b *testing.B) {
			pub, sub := p.open(b)
			benchRouter(b, pub, sub)
		})
	}
}

func benchRouter(b *testing.B, pub message.Publisher, sub message.Subscriber) {
	topic := "bench-" + watermill.NewShortUUID()
	var handled, target atomic.Int64
	all := make(chan struct{})
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, watermill.NopLogger{})
	if err != nil {
		b.Fatal(err)
	}
	// A Pub/Sub that creates its topics or groups ahead (Watermill's
	// Kafka Pub/Sub, on a broker that creates no topic on demand) does it
	// before anything is published.
	if si, ok := sub.(message.SubscribeInitializer); ok {
		if err := si.SubscribeInitialize(topic); err != nil {
			b.Fatal(err)
		}
	}
	router.AddConsumerHandler("count", topic, sub, func(*message.Message) error {
		if n := handled.Add(1); n == target.Load() {
			close(all)
		}
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- router.Run(ctx) }()
	select {
	case <-router.Running():
	case <-time.After(30 * time.Second):
		b.Fatal("the router did not start within 30s")
	}
	defer func() {
		if err := router.Close(); err != nil {
			b.Error(err)
		}
		if err := <-ran; err != nil {
			b.Error(err)
		}
		if err := pub.Close(); err != nil {
			b.Error(err)
		}
	}()

	payload := make([]byte, 256)
	published := 0
	start := time.Now()
	for b.Loop() {
		msgs := make([]*message.Message, benchBatch)
		for i := range msgs {
			msgs[i] = message.NewMessage(watermill.NewUUID(), payload)
		}
		if err := pub.Publish(topic, msgs...); err != nil {
			b.Fatal(err)
		}
		published += benchBatch
	}
	target.Store(int64(published))
	if handled.Load() < int64(published) {
		select {
		case <-all:
		case <-time.After(2 * time.Minute):
			b.Fatalf("handled %d of %d messages within 2 minutes", handled.Load(), published)
		}
	}
	b.ReportMetric(float64(published)/time.Since(start).Seconds(), "msgs/s")
}

func benchBus(b *testing.B, url string, inFlight int) (message.Publisher, message.Subscriber) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	bb, err := bus.Open(ctx, url, bus.WithObserver(observer.Nop()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := bb.Close(ctx); err != nil {
			b.Error(err)
		}
	})
	pub, err := NewPublisher(bb, PublisherConfig{})
	if err != nil {
		b.Fatal(err)
	}
	sub, err := NewSubscriber(bb, SubscriberConfig{Group: "bench", MaxInFlight: inFlight})
	if err != nil {
		b.Fatal(err)
	}
	return pub, sub
}

func benchRedisstream(b testing.TB, url string) (message.Publisher, message.Subscriber) {
	opts, err := redis.ParseURL(url)
	if err != nil {
		b.Fatal(err)
	}
	// The Pub/Sub's Close closes its client: one client each.
	pubClient, subClient := redis.NewClient(opts), redis.NewClient(opts)
	pub, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: pubClient}, watermill.NopLogger{})
	if err != nil {
		b.Fatal(err)
	}
	// A reader whose read failed pauses half a second before it looks at
	// its context again, and the subscriber's Close does not wait for
	// it: one that stops on the end of its context is gone when the
	// benchmark ends. Reads that succeed are not touched.
	stop := func(err error) bool { return errors.Is(err, context.Canceled) || errors.Is(err, redis.ErrClosed) }
	sub, err := redisstream.NewSubscriber(redisstream.SubscriberConfig{
		Client: subClient, ConsumerGroup: "bench", ShouldStopOnReadErrors: stop,
	}, watermill.NopLogger{})
	if err != nil {
		b.Fatal(err)
	}
	return pub, sub
}

func benchWatermillNATS(b testing.TB, url string) (message.Publisher, message.Subscriber) {
	return benchWatermillNATSSubscribers(b, url, 1)
}

// benchWatermillNATSSubscribers opens Watermill's NATS JetStream Pub/Sub
// with n subscribers of a queue group, each handing out one message at a
// time.
func benchWatermillNATSSubscribers(b testing.TB, url string, n int) (message.Publisher, message.Subscriber) {
	js := wmnats.JetStreamConfig{
		AutoProvision:    true,
		SubscribeOptions: []nc.SubOpt{nc.DeliverAll(), nc.AckExplicit()},
		DurablePrefix:    "bench",
	}
	pub, err := wmnats.NewPublisher(wmnats.PublisherConfig{URL: url, JetStream: js}, watermill.NopLogger{})
	if err != nil {
		b.Fatal(err)
	}
	sub, err := wmnats.NewSubscriber(wmnats.SubscriberConfig{
		URL: url, QueueGroupPrefix: "bench", SubscribersCount: n,
		AckWaitTimeout: 30 * time.Second, CloseTimeout: 30 * time.Second, JetStream: js,
	}, watermill.NopLogger{})
	if err != nil {
		b.Fatal(err)
	}
	return pub, sub
}

// benchWatermillAMQP opens watermill-amqp's durable queue Pub/Sub with
// its defaults (prefetch 1, no publisher confirms).
func benchWatermillAMQP(b testing.TB, url string) (message.Publisher, message.Subscriber) {
	return benchWatermillAMQPConfig(b, wmamqp.NewDurableQueueConfig(url))
}

// benchWatermillAMQPQuorum opens watermill-amqp with what the bus keeps
// on RabbitMQ: a quorum queue and publisher confirms (prefetch 1 still).
func benchWatermillAMQPQuorum(b testing.TB, url string) (message.Publisher, message.Subscriber) {
	cfg := wmamqp.NewDurableQueueConfig(url)
	cfg.Queue.Arguments = amqp091.Table{"x-queue-type": "quorum"}
	cfg.Publish.ConfirmDelivery = true
	return benchWatermillAMQPConfig(b, cfg)
}

func benchWatermillAMQPConfig(b testing.TB, cfg wmamqp.Config) (message.Publisher, message.Subscriber) {
	pub, err := wmamqp.NewPublisher(cfg, watermill.NopLogger{})
	if err != nil {
		b.Fatal(err)
	}
	sub, err := wmamqp.NewSubscriber(cfg, watermill.NopLogger{})
	if err != nil {
		b.Fatal(err)
	}
	return pub, sub
}

// benchWatermillKafka opens watermill-kafka's Pub/Sub (Sarama, a
// synchronous producer, one consumer group) with its defaults but two:
// the protocol version, which the broker's minimum needs, and a new
// group starting from the oldest offset, so that nothing published
// while the group joins is skipped.
func benchWatermillKafka(b testing.TB, addr string) (message.Publisher, message.Subscriber) {
	pcfg := wmkafka.DefaultSaramaSyncPublisherConfig()
	pcfg.Version = sarama.V3_6_0_0
	pub, err := wmkafka.NewPublisher(wmkafka.PublisherConfig{
		Brokers: []string{addr}, Marshaler: wmkafka.DefaultMarshaler{}, OverwriteSaramaConfig: pcfg,
	}, watermill.NopLogger{})
	if err != nil {
		b.Fatal(err)
	}
	scfg := wmkafka.DefaultSaramaSubscriberConfig()
	scfg.Version = sarama.V3_6_0_0
	scfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	sub, err := wmkafka.NewSubscriber(wmkafka.SubscriberConfig{
		Brokers: []string{addr}, Unmarshaler: wmkafka.DefaultMarshaler{}, OverwriteSaramaConfig: scfg,
		ConsumerGroup: "bench", InitializeTopicDetails: &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: 1},
	}, watermill.NopLogger{})
	if err != nil {
		b.Fatal(err)
	}
	return pub, sub
}
