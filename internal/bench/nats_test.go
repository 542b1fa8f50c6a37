package bench

// NATS JetStream: the bus against raw nats.go doing the same work, in one
// run, so the ratios compare like with like on the same machine and server.
//
//	go test ./internal/bench -run '^$' -bench NATS -benchtime 5x
//
// Each iteration (round) runs the raw client and the bus, in alternating
// order, over natsRound messages of 256 bytes. The benchmark reports the
// median rate of each side and the median of the per-round bus/raw
// ratios (medians, because the machine is shared and a round now and then
// meets a busy CPU); -v logs every round.
// The server is an embedded nats-server (file storage), or the one at
// $BUS_NATS_URL; streams get unique names and are deleted afterwards.
//
//   - PublishBatch: batches of 1000 messages, each with a Nats-Msg-Id;
//     raw PublishAsync with a window of 1000 and waits for the acks of the
//     batch; the bus Publishes the batch (async within its window of
//     1000) and returns when every message is stored.
//   - ConsumeAck: drain a prefilled stream with a new durable pull
//     consumer, acking each message; raw Consume with its default 500
//     message buffer; the bus subscribes with AckOnSuccess and 500 in
//     flight.
//   - E2E: one publisher (batches of 1000) and one consumer at once; the
//     figure counts until the consumer handled every message.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	bus "github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/natstest"
	busnats "github.com/eventbus-go/bus/nats"
)

const (
	natsPayload  = 256
	natsBatch    = 1000
	natsInFlight = 500
	natsWait     = 2 * time.Minute
)

func natsRound() int {
	if testing.Short() {
		return 5_000
	}
	return 20_000
}

// natsEnv is one benchmark's server, raw client and bus.
type natsEnv struct {
	b      *testing.B
	url    string
	nc     *natsgo.Conn
	js     jetstream.JetStream
	bus    *bus.Bus
	prefix string // stream name prefix of everything this benchmark made
	subj   string // subject prefix of the raw streams
	opts   busnats.Options
	n      int
}

func newNATSEnv(b *testing.B) *natsEnv {
	b.Helper()
	url := natstest.URL(b)
	id := strings.ToLower(nuid.Next()[14:])
	e := &natsEnv{b: b, url: url, prefix: "BENCH" + id, subj: "benchraw" + id}
	nc, err := natsgo.Connect(url)
	if err != nil {
		b.Fatalf("connect: %v", err)
	}
	e.nc = nc
	e.js, err = jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(natsBatch))
	if err != nil {
		b.Fatalf("jetstream: %v", err)
	}
	e.opts = busnats.Options{SubjectPrefix: "benchbus" + id, StreamPrefix: e.prefix + "BUS", PublishWindow: natsBatch}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	be, err := busnats.Connect(ctx, url, &e.opts)
	if err != nil {
		b.Fatalf("bus backend: %v", err)
	}
	e.bus = bus.New(be)
	b.Cleanup(e.close)
	return e
}

func (e *natsEnv) close() {
	ctx, cancel := context.WithTimeout(context.Background(), natsWait)
	defer cancel()
	if err := e.bus.Close(ctx); err != nil {
		e.b.Errorf("close the bus: %v", err)
	}
	for name := range e.js.StreamNames(ctx).Name() {
		if strings.HasPrefix(name, e.prefix) {
			if err := e.js.DeleteStream(ctx, name); err != nil {
				e.b.Errorf("delete stream %s: %v", name, err)
			}
		}
	}
	e.nc.Close()
}

// rawStream creates a stream for the raw client, shaped like the bus's.
func (e *natsEnv) rawStream(label string) (stream, subject string) {
	e.n++
	stream = fmt.Sprintf("%sRAW%s%d", e.prefix, label, e.n)
	subject = fmt.Sprintf("%s.%s%d", e.subj, strings.ToLower(label), e.n)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := e.js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{subject}, Storage: jetstream.FileStorage, MaxBytes: -1, MaxMsgs: -1})
	if err != nil {
		e.b.Fatalf("create stream: %v", err)
	}
	return stream, subject
}

func (e *natsEnv) busTopic(label string) string {
	e.n++
	return fmt.Sprintf("bench.%s%d", strings.ToLower(label), e.n)
}

func payload() []byte { return benchPayload(natsPayload) }

// rawPublish publishes n messages in batches of natsBatch, waiting for the
// acks of each batch, like bus.Publish does.
func (e *natsEnv) rawPublish(subject string, n int) {
	data := payload()
	futures := make([]jetstream.PubAckFuture, 0, natsBatch)
	for sent := 0; sent < n; {
		futures = futures[:0]
		for i := 0; i < natsBatch && sent < n; i++ {
			f, err := e.js.PublishAsync(subject, data, jetstream.WithMsgID(nuid.Next()))
			if err != nil {
				e.b.Fatalf("raw publish: %v", err)
			}
			futures = append(futures, f)
			sent++
		}
		for _, f := range futures {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				e.b.Fatalf("raw publish ack: %v", err)
			}
		}
	}
}

func (e *natsEnv) busPublish(topic string, n int) {
	busPublishBatches(e.b, e.bus, topic, n, natsBatch, payload())
}

// rawConsume drains n messages with a new durable pull consumer.
func (e *natsEnv) rawConsume(stream string, n int) {
	ctx, cancel := context.WithTimeout(context.Background(), natsWait)
	defer cancel()
	cons, err := e.js.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{
		Durable: "raw", AckPolicy: jetstream.AckExplicitPolicy, DeliverPolicy: jetstream.DeliverAllPolicy, AckWait: 30 * time.Second,
	})
	if err != nil {
		e.b.Fatalf("raw consumer: %v", err)
	}
	var got atomic.Int64
	done := make(chan struct{})
	cc, err := cons.Consume(func(m jetstream.Msg) {
		if err := m.Ack(); err != nil {
			e.b.Errorf("raw ack: %v", err)
		}
		if got.Add(1) == int64(n) {
			close(done)
		}
	})
	if err != nil {
		e.b.Fatalf("raw consume: %v", err)
	}
	select {
	case <-done:
	case <-ctx.Done():
		e.b.Fatalf("raw consume: %d of %d after %v", got.Load(), n, natsWait)
	}
	cc.Stop()
}

// busConsume drains n messages with a new group from the oldest. The
// subscription is closed afterwards, by the caller, outside the timing
// (the raw side's Stop is not timed either).
func (e *natsEnv) busConsume(topic string, n int) *bus.Subscription {
	ctx, cancel := context.WithTimeout(context.Background(), natsWait)
	defer cancel()
	var got atomic.Int64
	done := make(chan struct{})
	sub, err := e.bus.Subscribe(ctx, topic, func(context.Context, *bus.Delivery) error {
		if got.Add(1) == int64(n) {
			close(done)
		}
		return nil
	}, bus.WithGroup("g"), bus.WithStartFrom(bus.StartOldest), bus.WithMaxInFlight(natsInFlight))
	if err != nil {
		e.b.Fatalf("bus subscribe: %v", err)
	}
	select {
	case <-done:
	case <-ctx.Done():
		e.b.Fatalf("bus consume: %d of %d after %v", got.Load(), n, natsWait)
	}
	return sub
}

func (e *natsEnv) closeSub(sub *bus.Subscription) {
	ctx, cancel := context.WithTimeout(context.Background(), natsWait)
	defer cancel()
	if err := sub.Close(ctx); err != nil {
		e.b.Errorf("bus close subscription: %v", err)
	}
}

// rates records the time each side spent per round. The machine is
// shared, so a round now and then meets a busy CPU: the reported figures
// are medians over the rounds, which one noisy round does not move.
type rates struct {
	raw, bus []time.Duration
	msgs     int // per round
}

func (r *rates) report(b *testing.B) {
	if len(r.raw) == 0 {
		return
	}
	rawRate := float64(r.msgs) / median(r.raw).Seconds()
	busRate := float64(r.msgs) / median(r.bus).Seconds()
	ratios := make([]time.Duration, len(r.raw))
	for i := range r.raw {
		// bus/raw of one round, as a duration to reuse median (x 1e6).
		ratios[i] = time.Duration(float64(r.raw[i]) / float64(r.bus[i]) * 1e6)
	}
	b.ReportMetric(rawRate, "raw-msgs/s")
	b.ReportMetric(busRate, "bus-msgs/s")
	b.ReportMetric(float64(median(ratios))/1e6, "bus/raw")
	b.ReportMetric(0, "ns/op")
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func timed(f func()) time.Duration {
	start := time.Now()
	f()
	return time.Since(start)
}

// both runs the raw and the bus side of one round of n messages,
// alternating which goes first so neither always meets a warmer (or
// busier) server.
func both(b *testing.B, r *rates, round, n int, raw, bus func()) {
	r.msgs = n
	var rd, bd time.Duration
	if round%2 == 0 {
		rd = timed(raw)
		bd = timed(bus)
	} else {
		bd = timed(bus)
		rd = timed(raw)
	}
	if testing.Verbose() {
		b.Logf("round %d: raw %v, bus %v for %d messages", round, rd, bd, n)
	}
	r.raw = append(r.raw, rd)
	r.bus = append(r.bus, bd)
}

func BenchmarkNATSPublishBatch(b *testing.B) {
	e := newNATSEnv(b)
	_, subject := e.rawStream("pub")
	topic := e.busTopic("pub")
	e.busPublish(topic, natsBatch) // create the stream outside the timing
	n := natsRound()
	var r rates
	for round := 0; b.Loop(); round++ {
		both(b, &r, round, n, func() { e.rawPublish(subject, n) }, func() { e.busPublish(topic, n) })
	}
	r.report(b)
}

func BenchmarkNATSConsumeAck(b *testing.B) {
	e := newNATSEnv(b)
	n := natsRound()
	var r rates
	for round := 0; b.Loop(); round++ {
		b.StopTimer()
		stream, subject := e.rawStream("con")
		e.rawPublish(subject, n)
		topic := e.busTopic("con")
		e.busPublish(topic, n)
		b.StartTimer()
		var sub *bus.Subscription
		both(b, &r, round, n, func() { e.rawConsume(stream, n) }, func() { sub = e.busConsume(topic, n) })
		e.closeSub(sub)
	}
	r.report(b)
}

func BenchmarkNATSE2E(b *testing.B) {
	e := newNATSEnv(b)
	n := natsRound()
	var r rates
	for round := 0; b.Loop(); round++ {
		b.StopTimer()
		stream, subject := e.rawStream("e2e")
		topic := e.busTopic("e2e")
		e.busPublish(topic, 1) // create the stream
		b.StartTimer()
		var sub *bus.Subscription
		both(b, &r, round, n, func() {
			pubDone := make(chan struct{})
			go func() { defer close(pubDone); e.rawPublish(subject, n) }()
			e.rawConsume(stream, n)
			<-pubDone
		}, func() {
			pubDone := make(chan struct{})
			go func() { defer close(pubDone); e.busPublish(topic, n) }()
			sub = e.busConsume(topic, n+1)
			<-pubDone
		})
		e.closeSub(sub)
	}
	r.report(b)
}
