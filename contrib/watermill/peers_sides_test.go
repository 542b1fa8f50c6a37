package watermill

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eventbus-go/bus/internal/rawclient"
	"github.com/eventbus-go/bus/internal/rawclient/gochan"
	"github.com/eventbus-go/bus/internal/testkit/kafkatest"
	"github.com/eventbus-go/bus/internal/testkit/natstest"
	"github.com/eventbus-go/bus/internal/testkit/pgtest"
	"github.com/eventbus-go/bus/internal/testkit/rabbittest"
	"github.com/eventbus-go/bus/internal/testkit/redistest"
	busnats "github.com/eventbus-go/bus/nats"
	"github.com/eventbus-go/bus/postgres"
	"github.com/eventbus-go/bus/redisstream"
)

// The raw sides of BenchmarkPeers drive the loops of internal/rawclient,
// the baselines of `bus bench --baseline`, over the connection the bus's
// backend dials from the same URL.

// parseURL parses a URL for a backend's opener.
func parseURL(tb testing.TB, rawURL string) *url.URL {
	u, err := url.Parse(rawURL)
	if err != nil {
		tb.Fatal(err)
	}
	return u
}

// closeAtEnd closes c when tb ends.
func closeAtEnd(tb testing.TB, c io.Closer) {
	tb.Cleanup(func() {
		if err := c.Close(); err != nil {
			tb.Error(err)
		}
	})
}

// mem: a buffered Go channel, the bus on mem:// and Watermill's
// GoChannel.

func openMemPeers(tb testing.TB, url string) peerSides {
	gc := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	return peerSides{
		raw: chanSide{}, bus: openBusSide(tb, url), watermill: newWatermillSide(tb, gc, gc),
		rawName: "Go channel", watermillName: "GoChannel",
	}
}

type chanSide struct{}

// chanBuffer is the channel's capacity, as in `bus bench --baseline`.
const chanBuffer = 1024

type chanPass struct {
	ch   *gochan.Channel
	stop chan struct{}
	done chan struct{}
}

func (chanSide) pass(_ context.Context, h func([]byte)) (peerPass, error) {
	p := &chanPass{ch: gochan.New(chanBuffer), stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		p.ch.Consume(p.stop, h)
	}()
	return p, nil
}

func (p *chanPass) publish(ctx context.Context, payloads [][]byte) error {
	return p.ch.Publish(ctx, payloads)
}

func (p *chanPass) ended() <-chan struct{} { return nil }

func (p *chanPass) close(context.Context) error {
	close(p.stop)
	<-p.done
	return nil
}

// redis: go-redis (pipelined XADDs, XREADGROUP COUNT peersInFlight and
// one XACK per read), the bus on redis:// and watermill-redisstream.

func startRedisPeer(tb testing.TB) string { return redistest.Start(tb).URL() }

func openRedisPeers(tb testing.TB, rawURL string) peerSides {
	be, err := redisstream.OpenURL(context.Background(), parseURL(tb, rawURL))
	if err != nil {
		tb.Fatal(err)
	}
	closeAtEnd(tb, be)
	rc := be.Client()
	pub, sub := benchRedisstream(tb, rawURL)
	wm := newWatermillSide(tb, pub, sub)
	wm.forget = func(ctx context.Context, topic string) error { return rc.Del(ctx, topic).Err() }
	return peerSides{
		raw: redisSide{rc}, bus: openBusSide(tb, rawURL), watermill: wm,
		rawName: "go-redis", watermillName: "watermill-redisstream",
	}
}

type redisSide struct{ rc redis.UniversalClient }

type redisPass struct {
	loop *rawclient.Loop
	rc   redis.UniversalClient
	key  string
	pub  *rawclient.RedisPublisher
}

func (s redisSide) pass(ctx context.Context, h func([]byte)) (peerPass, error) {
	key := "peers-raw-" + watermill.NewShortUUID()
	if err := s.rc.XGroupCreateMkStream(ctx, key, peersGroup, "0").Err(); err != nil {
		return nil, fmt.Errorf("create group: %w", err)
	}
	r := rawclient.RedisReader{Client: s.rc, Key: key, Group: peersGroup, Consumer: "c", Count: peersInFlight, Block: 250 * time.Millisecond}
	return &redisPass{
		loop: rawclient.StartLoop(func(ctx context.Context) error { return r.Run(ctx, h, nil) }),
		rc:   s.rc, key: key, pub: rawclient.NewRedisPublisher(s.rc, key, peersBatch),
	}, nil
}

func (p *redisPass) publish(ctx context.Context, payloads [][]byte) error {
	return p.pub.Publish(ctx, payloads)
}

func (p *redisPass) ended() <-chan struct{} { return p.loop.Ended() }

func (p *redisPass) close(ctx context.Context) error {
	return errors.Join(p.loop.Stop(ctx), p.loop.Err(), p.rc.Del(ctx, p.key).Err())
}

// nats: nats.go on JetStream (PublishMsgAsync awaited per batch, a
// durable pull consumer with explicit acks), the bus on nats:// and
// watermill-nats.

func startNATSPeer(tb testing.TB) string { return natstest.Start(tb).URL() }

func openNATSPeers(tb testing.TB, rawURL string) peerSides {
	be, err := busnats.Open(context.Background(), parseURL(tb, rawURL), nil)
	if err != nil {
		tb.Fatal(err)
	}
	closeAtEnd(tb, be)
	js, err := jetstream.New(be.Conn(), jetstream.WithPublishAsyncMaxPending(4000))
	if err != nil {
		tb.Fatal(err)
	}
	storage := jetstream.MemoryStorage
	if be.Capabilities().Persistent {
		storage = jetstream.FileStorage
	}
	pub, sub := benchWatermillNATS(tb, rawURL)
	wm := newWatermillSide(tb, pub, sub)
	wm.forget = func(ctx context.Context, topic string) error { return js.DeleteStream(ctx, topic) }
	return peerSides{
		raw: natsSide{js: js, storage: storage}, bus: openBusSide(tb, rawURL), watermill: wm,
		rawName: "nats.go jetstream", watermillName: "watermill-nats",
	}
}

type natsSide struct {
	js      jetstream.JetStream
	storage jetstream.StorageType
}

type natsPass struct {
	js     jetstream.JetStream
	stream string
	pub    *rawclient.NATSPublisher
	cc     jetstream.ConsumeContext
	acks   chan error // the first ack failure
	ends   chan struct{}
}

func (s natsSide) pass(ctx context.Context, h func([]byte)) (peerPass, error) {
	stream := "PEERS_RAW_" + watermill.NewShortUUID()
	subject := "peers-raw." + stream
	if _, err := s.js.CreateStream(ctx, jetstream.StreamConfig{
		Name: stream, Subjects: []string{subject}, Storage: s.storage,
	}); err != nil {
		return nil, fmt.Errorf("create stream: %w", err)
	}
	cons, err := s.js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
		Durable: peersGroup, AckPolicy: jetstream.AckExplicitPolicy, DeliverPolicy: jetstream.DeliverAllPolicy,
		MaxAckPending: peersInFlight,
	})
	if err != nil {
		return nil, errors.Join(fmt.Errorf("create consumer: %w", err), s.js.DeleteStream(ctx, stream))
	}
	p := &natsPass{js: s.js, stream: stream, pub: rawclient.NewNATSPublisher(s.js, subject, peersBatch),
		acks: make(chan error, 1), ends: make(chan struct{})}
	p.cc, err = rawclient.NATSConsume(cons, peersInFlight, h, func(err error) {
		select {
		case p.acks <- err:
			close(p.ends)
		default:
		}
	})
	if err != nil {
		return nil, errors.Join(fmt.Errorf("consume: %w", err), s.js.DeleteStream(ctx, stream))
	}
	return p, nil
}

func (p *natsPass) publish(ctx context.Context, payloads [][]byte) error {
	return p.pub.Publish(ctx, payloads)
}

func (p *natsPass) ended() <-chan struct{} { return p.ends }

func (p *natsPass) close(ctx context.Context) error {
	p.cc.Stop()
	var err error
	select {
	case <-p.cc.Closed():
	case <-ctx.Done():
		err = fmt.Errorf("stop the consumer: %w", ctx.Err())
	}
	select {
	case aerr := <-p.acks:
		err = errors.Join(err, fmt.Errorf("ack: %w", aerr))
	default:
	}
	return errors.Join(err, p.js.DeleteStream(ctx, p.stream))
}

// postgres: pgx on a table of its own (rawclient.PGQueue: one INSERT per
// batch, a leasing UPDATE ... SKIP LOCKED of up to peersInFlight rows,
// one DELETE per fetch, an empty table polled every millisecond), the
// bus on postgres:// and watermill-sql (its PostgreSQL schema with
// BYTEA payloads and its offsets adapter, polling an empty table every
// millisecond as the raw loop does, where its default is a second).

func startPGPeer(tb testing.TB) string { return pgtest.Start(tb).URL() }

// pgPoll is how often the raw loop and watermill-sql poll an empty
// table.
const pgPoll = time.Millisecond

func openPGPeers(tb testing.TB, rawURL string) peerSides {
	be, err := postgres.OpenURL(context.Background(), parseURL(tb, rawURL))
	if err != nil {
		tb.Fatal(err)
	}
	closeAtEnd(tb, be)
	return peerSides{
		raw: pgSide{be.Pool()}, bus: openBusSide(tb, rawURL), watermill: newWatermillSQL(tb, be.Pool()),
		rawName: "pgx", watermillName: "watermill-sql",
	}
}

type pgSide struct{ pool *pgxpool.Pool }

type pgPass struct {
	loop *rawclient.Loop
	q    *rawclient.PGQueue
}

func (s pgSide) pass(ctx context.Context, h func([]byte)) (peerPass, error) {
	q := &rawclient.PGQueue{Pool: s.pool, Table: "peers_raw_" + watermill.NewShortUUID(), Count: peersInFlight, PollEvery: pgPoll}
	if err := q.Create(ctx); err != nil {
		return nil, fmt.Errorf("create the table: %w", err)
	}
	return &pgPass{loop: rawclient.StartLoop(func(ctx context.Context) error { return q.Run(ctx, h) }), q: q}, nil
}

func (p *pgPass) publish(ctx context.Context, payloads [][]byte) error {
	return p.q.Publish(ctx, payloads)
}

func (p *pgPass) ended() <-chan struct{} { return p.loop.Ended() }

func (p *pgPass) close(ctx context.Context) error {
	return errors.Join(p.loop.Stop(ctx), p.loop.Err(), p.q.Drop(ctx))
}

// newWatermillSQL opens watermill-sql's PostgreSQL Pub/Sub on pool.
func newWatermillSQL(tb testing.TB, pool *pgxpool.Pool) *watermillSide {
	db := wmsql.BeginnerFromPgx(pool)
	schema := wmsql.DefaultPostgreSQLSchema{GeneratePayloadType: func(string) string { return "BYTEA" }}
	offsets := wmsql.DefaultPostgreSQLOffsetsAdapter{}
	pub, err := wmsql.NewPublisher(db, wmsql.PublisherConfig{SchemaAdapter: schema, AutoInitializeSchema: true}, watermill.NopLogger{})
	if err != nil {
		tb.Fatal(err)
	}
	sub, err := wmsql.NewSubscriber(db, wmsql.SubscriberConfig{
		ConsumerGroup: peersGroup, SchemaAdapter: schema, OffsetsAdapter: offsets,
		InitializeSchema: true, PollInterval: pgPoll,
	}, watermill.NopLogger{})
	if err != nil {
		tb.Fatal(err)
	}
	s := newWatermillSide(tb, pub, sub)
	s.forget = func(ctx context.Context, topic string) error {
		_, err := pool.Exec(ctx, "DROP TABLE IF EXISTS "+schema.MessagesTable(topic)+", "+offsets.MessagesOffsetsTable(topic))
		return err
	}
	return s
}

// amqp: amqp091-go (a fanout exchange and a quorum queue, as the bus
// lays a topic and a group out; each batch on a confirm-mode channel,
// persistent, awaited; a consumer with a prefetch of peersInFlight acking
// each message), the bus on amqp:// and watermill-amqp with what the bus
// keeps (a quorum queue, publisher confirms; prefetch 1, its default).

func startAMQPPeer(tb testing.TB) string { return rabbittest.Start(tb).URL() }

func openAMQPPeers(tb testing.TB, rawURL string) peerSides {
	u := parseURL(tb, rawURL)
	u.RawQuery = "" // the bus's own parameters
	dial := func() *amqp.Connection {
		c, err := amqp.DialConfig(u.String(), amqp.Config{Dial: amqp.DefaultDial(10 * time.Second), Heartbeat: 5 * time.Second})
		if err != nil {
			tb.Fatal(err)
		}
		closeAtEnd(tb, c)
		return c
	}
	pub, sub := benchWatermillAMQPQuorum(tb, u.String())
	return peerSides{
		raw: amqpSide{pub: dial(), sub: dial()}, bus: openBusSide(tb, rawURL), watermill: newWatermillSide(tb, pub, sub),
		rawName: "amqp091-go", watermillName: "watermill-amqp, quorum",
	}
}

// amqpSide publishes and consumes on connections apart, as the bus does.
type amqpSide struct{ pub, sub *amqp.Connection }

type amqpPass struct {
	conn            *amqp.Connection
	exchange, queue string
	pub             *rawclient.AMQPPublisher
	loop            *rawclient.Loop
}

func (s amqpSide) pass(_ context.Context, h func([]byte)) (peerPass, error) {
	exchange := "peers-raw-" + watermill.NewShortUUID()
	queue := exchange + "-q"
	if err := rawclient.AMQPDeclare(s.pub, exchange, queue); err != nil {
		return nil, err
	}
	pub, err := rawclient.NewAMQPPublisher(s.pub, exchange)
	if err != nil {
		return nil, errors.Join(err, rawclient.AMQPDelete(s.pub, exchange, queue))
	}
	c, err := rawclient.NewAMQPConsumer(s.sub, queue, peersInFlight)
	if err != nil {
		return nil, errors.Join(err, pub.Close(), rawclient.AMQPDelete(s.pub, exchange, queue))
	}
	return &amqpPass{conn: s.pub, exchange: exchange, queue: queue, pub: pub,
		loop: rawclient.StartLoop(func(ctx context.Context) error { return c.Run(ctx, h) })}, nil
}

func (p *amqpPass) publish(ctx context.Context, payloads [][]byte) error {
	return p.pub.Publish(ctx, payloads)
}

func (p *amqpPass) ended() <-chan struct{} { return p.loop.Ended() }

func (p *amqpPass) close(ctx context.Context) error {
	return errors.Join(p.loop.Stop(ctx), p.loop.Err(), p.pub.Close(), rawclient.AMQPDelete(p.conn, p.exchange, p.queue))
}

// kafka: franz-go (an idempotent producer with acks=all, each batch
// produced at once and awaited; a group member polling peersInFlight
// records and committing once per poll), the bus on kafka:// and
// watermill-kafka (Sarama, a synchronous producer).

func startKafkaPeer(tb testing.TB) string { return kafkatest.Start(tb).URL() }

func openKafkaPeers(tb testing.TB, rawURL string) peerSides {
	seeds := strings.Split(parseURL(tb, rawURL).Host, ",")
	cl, err := rawclient.NewKafkaProducer(seeds)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(cl.Close)
	pub, sub := benchWatermillKafka(tb, seeds[0])
	wm := newWatermillSide(tb, pub, sub)
	wm.forget = func(ctx context.Context, topic string) error {
		return rawclient.KafkaDelete(ctx, cl, topic, "bench")
	}
	return peerSides{
		raw: kafkaSide{seeds: seeds, pub: cl}, bus: openBusSide(tb, rawURL), watermill: wm,
		rawName: "franz-go", watermillName: "watermill-kafka",
	}
}

type kafkaSide struct {
	seeds []string
	pub   *kgo.Client
}

type kafkaPass struct {
	pub          *kgo.Client
	member       *kgo.Client
	topic, group string
	loop         *rawclient.Loop
}

func (s kafkaSide) pass(ctx context.Context, h func([]byte)) (peerPass, error) {
	topic := "peers-raw-" + watermill.NewShortUUID()
	if err := rawclient.KafkaCreateTopic(ctx, s.pub, topic, 1); err != nil {
		return nil, err
	}
	group := topic + "-g"
	member, err := rawclient.NewKafkaMember(s.seeds, group, topic)
	if err != nil {
		return nil, errors.Join(err, rawclient.KafkaDelete(ctx, s.pub, topic, group))
	}
	return &kafkaPass{pub: s.pub, member: member, topic: topic, group: group,
		loop: rawclient.StartLoop(func(ctx context.Context) error {
			return rawclient.KafkaConsume(ctx, member, peersInFlight, h)
		})}, nil
}

func (p *kafkaPass) publish(ctx context.Context, payloads [][]byte) error {
	return rawclient.KafkaPublish(ctx, p.pub, p.topic, payloads)
}

func (p *kafkaPass) ended() <-chan struct{} { return p.loop.Ended() }

func (p *kafkaPass) close(ctx context.Context) error {
	err := errors.Join(p.loop.Stop(ctx), p.loop.Err())
	p.member.Close()
	return errors.Join(err, rawclient.KafkaDelete(ctx, p.pub, p.topic, p.group))
}
