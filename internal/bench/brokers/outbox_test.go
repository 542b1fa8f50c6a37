package brokers

// The transactional outbox against the dual write it replaces, in one run:
//
//	go test ./internal/bench/brokers -run '^$' -bench Outbox -benchtime 5x
//
//   - OutboxE2E: one writer commits batches of 16 (each batch a statement
//     of its own, so a transaction) and one consumer reads at once. The
//     raw side is rawclient.PGRedisPublisher (an INSERT of the batch,
//     then its XADDs) with the raw XREADGROUP reader; the bus side is
//     outbox.Publish with a relay to the bus on Redis and a subscription.
//     The figure counts until the consumer handled every message. The
//     PostgreSQL server is a private one (internal/testkit/pgtest, fsync off), so
//     the figures leave out the disk; `bus bench --scenario outbox`
//     measures with a durable server.

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	bus "github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/rawclient"
	"github.com/eventbus-go/bus/internal/testkit/pgtest"
	"github.com/eventbus-go/bus/observer"
	"github.com/eventbus-go/bus/outbox"
)

// outboxEnv adds a private PostgreSQL with the outbox, a relay and the
// raw table to a redisEnv.
type outboxEnv struct {
	*redisEnv
	conn *pgx.Conn
}

func newOutboxEnv(b *testing.B) *outboxEnv {
	b.Helper()
	e := &outboxEnv{redisEnv: newRedisEnv(b)}
	db := pgtest.Start(b).URL()
	ctx, cancel := context.WithTimeout(context.Background(), redisWait)
	defer cancel()
	var err error
	if e.conn, err = pgx.Connect(ctx, db); err != nil {
		b.Fatalf("connect: %v", err)
	}
	b.Cleanup(func() { _ = e.conn.Close(context.Background()) })
	if err := outbox.Migrate(ctx, e.conn); err != nil {
		b.Fatal(err)
	}
	if _, err := e.conn.Exec(ctx, rawclient.PGRedisSchema); err != nil {
		b.Fatalf("raw table: %v", err)
	}
	relay, err := outbox.NewRelay(db, e.bus, outbox.WithObserver(observer.Nop()))
	if err != nil {
		b.Fatal(err)
	}
	// Registered after the redisEnv's cleanup, so it runs first: the relay
	// stops before the bus closes.
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), redisWait)
		defer cancel()
		if err := relay.Close(ctx); err != nil {
			b.Errorf("close the relay: %v", err)
		}
	})
	return e
}

// write commits n messages in batches of redisBatch through publish.
func outboxWrite(n int, publish func(ctx context.Context, payloads [][]byte) error) error {
	ctx := context.Background()
	batch := make([][]byte, redisBatch)
	for i := range batch {
		batch[i] = redisPayload()
	}
	for sent := 0; sent < n; {
		k := min(redisBatch, n-sent)
		if err := publish(ctx, batch[:k]); err != nil {
			return err
		}
		sent += k
	}
	return nil
}

func (e *outboxEnv) rawSide(stream string, n int) {
	if err := e.client.XGroupCreateMkStream(context.Background(), stream, "raw", "$").Err(); err != nil {
		e.b.Fatalf("raw group: %v", err)
	}
	p := rawclient.NewPGRedisPublisher(e.conn, rawclient.NewRedisPublisher(e.client, stream, redisBatch), redisBatch)
	pubErr := make(chan error, 1)
	go func() { pubErr <- outboxWrite(n, p.Publish) }()
	e.rawConsumeExisting(stream, n)
	if err := <-pubErr; err != nil {
		e.b.Fatalf("raw publish: %v", err)
	}
}

func (e *outboxEnv) busSide(topic string, n int) {
	msgs := make([]*bus.Message, redisBatch)
	publish := func(ctx context.Context, payloads [][]byte) error {
		for i, p := range payloads {
			msgs[i] = &bus.Message{Payload: p}
		}
		return outbox.Publish(ctx, e.conn, topic, msgs[:len(payloads)]...)
	}
	subscribed := make(chan struct{})
	pubErr := make(chan error, 1)
	go func() {
		<-subscribed
		pubErr <- outboxWrite(n, publish)
	}()
	e.busConsumeSignal(topic, n, subscribed)
	if err := <-pubErr; err != nil {
		e.b.Fatalf("outbox publish: %v", err)
	}
}

func BenchmarkOutboxE2E(b *testing.B) {
	e := newOutboxEnv(b)
	n := redisRound() / 5
	r := redisRates{srv: e.client}
	for i := 0; b.Loop(); i++ {
		stream := e.rawStream("outbox")
		topic := e.busTopic("outbox")
		raw := func() { e.rawSide(stream, n) }
		busSide := func() { e.busSide(topic, n) }
		if i%2 == 0 { // alternate the order between iterations
			r.timedSide(false, raw)
			r.timedSide(true, busSide)
		} else {
			r.timedSide(true, busSide)
			r.timedSide(false, raw)
		}
		r.msgs += n
		b.StopTimer()
		e.client.Del(context.Background(), stream, fmt.Sprintf("%s:{%s}", e.prefix, topic))
		if _, err := e.conn.Exec(context.Background(), "TRUNCATE "+rawclient.PGRedisTable); err != nil {
			b.Fatalf("empty the raw table: %v", err)
		}
		b.StartTimer()
	}
	r.report(b)
}
