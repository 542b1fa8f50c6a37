package brokers

// NATS JetStream: the bus against raw nats.go doing the same work, in one
// run, so the ratios compare like with like on the same machine and server.
//
//	go test ./internal/bench/brokers -run '^$' -bench NATS -benchtime 5x
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
//     raw PublishMsgAsync with a window of 1000 and waits for the acks of
//     the batch; the bus Publishes the batch (async within its window of
//     1000) and returns when every message is stored.
//   - PublishBatch16: one caller publishing batches of 16. Raw: the batch
//     with PublishMsgAsync, then wait for that batch's acks (what a nil
//     error from bus.Publish guarantees: every message stored).
//   - PublishConcurrent64: 64 goroutines, one message per call, each
//     waiting for its ack (raw PublishMsgAsync and wait; bus.Publish).
//
//     Both publish benchmarks also run, for context, raw PublishAsync
//     with a window of 1000 and no per-call wait (fire and forget within
//     the window, then wait for the last acks), and report the bus's
//     ratio to it as bus/raw-window. That pattern gives no caller a
//     stored-or-error answer, so it is an upper bound, not a peer.
//   - PublishAsync: one caller, one message per call, confirmed later
//     within a window of 1000: raw PublishMsgAsync checking the acks as
//     they come (rawclient.NATSAsyncPublisher), against bus.PublishAsync
//     checking the results as they come, then Flush.
//   - ConsumeAck: drain a prefilled stream with a new durable pull
//     consumer, acking each message; raw Consume with its default 500
//     message buffer; the bus subscribes with AckOnSuccess and 500 in
//     flight.
//   - E2E: one publisher (batches of 1000) and one consumer at once; the
//     figure counts until the consumer handled every message.
//   - Latency5k: 5,000 msgs/s below saturation, one message per publish
//     call (16 publishing goroutines fed by a pacer), raw js.PublishMsg
//     and a pull consumer (Consume) with explicit acks against bus.Publish
//     and a subscription with AckOnSuccess. The latency of a message is
//     from the time the schedule gave it (not when it was actually sent,
//     so a stalled publisher is counted) to its handler; the benchmark
//     reports p50 and p99 of each side over every round and the p99
//     ratio bus/raw.

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	bus "github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/rawclient"
	"github.com/eventbus-go/bus/internal/testkit/benchload"
	"github.com/eventbus-go/bus/internal/testkit/natstest"
	busnats "github.com/eventbus-go/bus/nats"
)

const (
	natsPayload    = 256
	natsBatch      = 1000
	natsSmallBatch = 16
	natsCallers    = 64
	natsInFlight   = 500
	natsWait       = 2 * time.Minute

	natsRate       = 5_000 // msgs/s of the latency benchmark
	natsRateFor    = 2 * time.Second
	natsRateSender = 16 // publishing goroutines of the latency benchmark
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

	asyncErrs atomic.Int64 // failed fire-and-forget raw publishes
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
	e.js, err = jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(natsBatch),
		jetstream.WithPublishAsyncErrHandler(func(jetstream.JetStream, *natsgo.Msg, error) { e.asyncErrs.Add(1) }),
	)
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

func payload() []byte { return benchload.Payload(natsPayload) }

// rawMsg is a raw message with its own Nats-Msg-Id, like the bus sends.
func rawMsg(subject string, data []byte) *natsgo.Msg {
	return &natsgo.Msg{Subject: subject, Data: data, Header: natsgo.Header{jetstream.MsgIDHeader: []string{nuid.Next()}}}
}

// rawPublish publishes n messages in batches of batch with the raw
// baseline's publisher (rawclient.NATSPublisher), waiting for the acks of
// each batch before the next, like bus.Publish does.
func (e *natsEnv) rawPublish(subject string, n, batch int) {
	data := payload()
	p := rawclient.NewNATSPublisher(e.js, subject, batch)
	payloads := make([][]byte, batch)
	for i := range payloads {
		payloads[i] = data
	}
	for sent := 0; sent < n; {
		k := min(batch, n-sent)
		if err := p.Publish(context.Background(), payloads[:k]); err != nil {
			e.b.Fatalf("raw publish: %v", err)
		}
		sent += k
	}
}

// rawPublishWindow publishes n messages with PublishAsync from callers
// goroutines, without waiting for any ack until the end: only the window
// of 1000 outstanding acks paces them.
func (e *natsEnv) rawPublishWindow(subject string, n, callers int) {
	data := payload()
	if err := fanOut(n, callers, func(int64) error {
		_, err := e.js.PublishMsgAsync(rawMsg(subject, data), jetstream.WithStallWait(natsWait))
		return err
	}); err != nil {
		e.b.Fatalf("raw publish: %v", err)
	}
	select {
	case <-e.js.PublishAsyncComplete():
	case <-time.After(natsWait):
		e.b.Fatalf("raw publish: acks missing after %v", natsWait)
	}
	if n := e.asyncErrs.Load(); n > 0 {
		e.b.Fatalf("raw publish: %d acks failed", n)
	}
}

// rawPublishConcurrent publishes n messages from callers goroutines, one
// message per call, each waiting for its ack.
func (e *natsEnv) rawPublishConcurrent(subject string, n, callers int) {
	data := payload()
	if err := fanOut(n, callers, func(int64) error {
		return rawclient.NewNATSPublisher(e.js, subject, 1).Publish(context.Background(), [][]byte{data})
	}); err != nil {
		e.b.Fatalf("raw publish: %v", err)
	}
}

func (e *natsEnv) busPublish(topic string, n, batch int) {
	busPublishBatches(e.b, e.bus, topic, n, batch, payload())
}

// busPublishConcurrent publishes n messages from callers goroutines, one
// message per Publish call.
func (e *natsEnv) busPublishConcurrent(topic string, n, callers int) {
	data := payload()
	ctx := context.Background()
	if err := fanOut(n, callers, func(int64) error {
		return e.bus.Publish(ctx, topic, &bus.Message{Payload: data})
	}); err != nil {
		e.b.Fatalf("bus publish: %v", err)
	}
}

// rawConsumer creates the raw side's durable pull consumer on stream,
// from the first message, with explicit acks.
func (e *natsEnv) rawConsumer(ctx context.Context, stream string) jetstream.Consumer {
	cons, err := e.js.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{
		Durable: "raw", AckPolicy: jetstream.AckExplicitPolicy, DeliverPolicy: jetstream.DeliverAllPolicy, AckWait: 30 * time.Second,
	})
	if err != nil {
		e.b.Fatalf("raw consumer: %v", err)
	}
	return cons
}

// rawConsume drains n messages with a new durable pull consumer.
func (e *natsEnv) rawConsume(stream string, n int) {
	ctx, cancel := context.WithTimeout(context.Background(), natsWait)
	defer cancel()
	cons := e.rawConsumer(ctx, stream)
	var got atomic.Int64
	done := make(chan struct{})
	cc, err := rawclient.NATSConsume(cons, natsInFlight, func([]byte) {
		if got.Add(1) == int64(n) {
			close(done)
		}
	}, func(err error) { e.b.Errorf("raw ack: %v", err) })
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
	}, bus.WithGroup("g"), bus.WithStartFrom(backend.StartOldest), bus.WithMaxInFlight(natsInFlight))
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
	window   []time.Duration // raw fire-and-forget within a window, if run
	msgs     int             // per round
}

func (r *rates) report(b *testing.B) {
	if len(r.raw) == 0 {
		return
	}
	b.ReportMetric(float64(r.msgs)/median(r.raw).Seconds(), "raw-msgs/s")
	b.ReportMetric(float64(r.msgs)/median(r.bus).Seconds(), "bus-msgs/s")
	b.ReportMetric(medianRatio(r.raw, r.bus), "bus/raw")
	if len(r.window) > 0 {
		b.ReportMetric(float64(r.msgs)/median(r.window).Seconds(), "raw-window-msgs/s")
		b.ReportMetric(medianRatio(r.window, r.bus), "bus/raw-window")
	}
	b.ReportMetric(0, "ns/op")
}

// medianRatio is the median over rounds of raw time / bus time, that is
// of the bus/raw rate ratio.
func medianRatio(raw, bus []time.Duration) float64 {
	ratios := make([]time.Duration, len(raw))
	for i := range raw {
		// As a duration to reuse median (x 1e6).
		ratios[i] = time.Duration(float64(raw[i]) / float64(bus[i]) * 1e6)
	}
	return float64(median(ratios)) / 1e6
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

// three is both with the raw fire-and-forget side as well, in rotating
// order.
func three(b *testing.B, r *rates, round, n int, raw, window, bus func()) {
	r.msgs = n
	sides := []func(){raw, window, bus}
	var d [3]time.Duration
	for k := range 3 {
		i := (round + k) % 3
		d[i] = timed(sides[i])
	}
	if testing.Verbose() {
		b.Logf("round %d: raw %v, raw window %v, bus %v for %d messages", round, d[0], d[1], d[2], n)
	}
	r.raw = append(r.raw, d[0])
	r.window = append(r.window, d[1])
	r.bus = append(r.bus, d[2])
}

func BenchmarkNATSPublishBatch(b *testing.B) {
	e := newNATSEnv(b)
	_, subject := e.rawStream("pub")
	topic := e.busTopic("pub")
	e.busPublish(topic, natsBatch, natsBatch) // create the stream outside the timing
	n := natsRound()
	var r rates
	for round := 0; b.Loop(); round++ {
		both(b, &r, round, n, func() { e.rawPublish(subject, n, natsBatch) }, func() { e.busPublish(topic, n, natsBatch) })
	}
	r.report(b)
}

func BenchmarkNATSPublishBatch16(b *testing.B) {
	e := newNATSEnv(b)
	_, subject := e.rawStream("pub")
	topic := e.busTopic("pub")
	e.busPublish(topic, natsSmallBatch, natsSmallBatch) // create the stream outside the timing
	n := natsRound()
	var r rates
	for round := 0; b.Loop(); round++ {
		three(b, &r, round, n,
			func() { e.rawPublish(subject, n, natsSmallBatch) },
			func() { e.rawPublishWindow(subject, n, 1) },
			func() { e.busPublish(topic, n, natsSmallBatch) })
	}
	r.report(b)
}

func BenchmarkNATSPublishConcurrent64(b *testing.B) {
	e := newNATSEnv(b)
	_, subject := e.rawStream("pub")
	topic := e.busTopic("pub")
	e.busPublish(topic, 1, 1) // create the stream outside the timing
	n := natsRound()
	var r rates
	for round := 0; b.Loop(); round++ {
		three(b, &r, round, n,
			func() { e.rawPublishConcurrent(subject, n, natsCallers) },
			func() { e.rawPublishWindow(subject, n, natsCallers) },
			func() { e.busPublishConcurrent(topic, n, natsCallers) })
	}
	r.report(b)
}

func BenchmarkNATSPublishAsync(b *testing.B) {
	e := newNATSEnv(b)
	_, subject := e.rawStream("pub")
	topic := e.busTopic("pub")
	e.busPublish(topic, 1, 1) // create the stream outside the timing
	n := natsRound()
	var r rates
	for round := 0; b.Loop(); round++ {
		both(b, &r, round, n, func() { e.rawPublishAsync(subject, n) }, func() { e.busPublishAsync(topic, n) })
	}
	r.report(b)
}

// rawPublishAsync publishes n messages one per call with PublishMsgAsync,
// checking the acks as they come, then waits for the rest.
func (e *natsEnv) rawPublishAsync(subject string, n int) {
	data := payload()
	p := rawclient.NewNATSAsyncPublisher(e.js, subject)
	for range n {
		if err := p.Publish(data); err != nil {
			e.b.Fatalf("raw publish: %v", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), natsWait)
	defer cancel()
	if failed, err := p.Flush(ctx); err != nil {
		e.b.Fatalf("raw publish: %d failed: %v", failed, err)
	}
}

// busPublishAsync publishes n messages one per PublishAsync call, checking
// the results already known oldest first, then Flushes.
func (e *natsEnv) busPublishAsync(topic string, n int) {
	data := payload()
	ctx := context.Background()
	pending := make([]*bus.PublishResult, 0, 2*natsBatch)
	head := 0
	check := func(r *bus.PublishResult) {
		if err := r.Get(ctx); err != nil {
			e.b.Fatalf("bus publish: %v", err)
		}
	}
	for range n {
		pending = append(pending, e.bus.PublishAsync(ctx, topic, &bus.Message{Payload: data}))
		for ; head < len(pending); head++ {
			select {
			case <-pending[head].Done():
				check(pending[head])
				pending[head] = nil
				continue
			default:
			}
			break
		}
		if head >= len(pending)/2 {
			pending = pending[:copy(pending, pending[head:])]
			head = 0
		}
	}
	fctx, cancel := context.WithTimeout(ctx, natsWait)
	defer cancel()
	if err := e.bus.Flush(fctx); err != nil {
		e.b.Fatalf("bus flush: %v", err)
	}
	for _, r := range pending[head:] {
		check(r)
	}
}

func BenchmarkNATSConsumeAck(b *testing.B) {
	e := newNATSEnv(b)
	n := natsRound()
	var r rates
	for round := 0; b.Loop(); round++ {
		b.StopTimer()
		stream, subject := e.rawStream("con")
		e.rawPublish(subject, n, natsBatch)
		topic := e.busTopic("con")
		e.busPublish(topic, n, natsBatch)
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
		e.busPublish(topic, 1, 1) // create the stream
		b.StartTimer()
		var sub *bus.Subscription
		both(b, &r, round, n, func() {
			pubDone := make(chan struct{})
			go func() { defer close(pubDone); e.rawPublish(subject, n, natsBatch) }()
			e.rawConsume(stream, n)
			<-pubDone
		}, func() {
			pubDone := make(chan struct{})
			go func() { defer close(pubDone); e.busPublish(topic, n, natsBatch) }()
			sub = e.busConsume(topic, n+1)
			<-pubDone
		})
		e.closeSub(sub)
	}
	r.report(b)
}

// latencies records, per message index, the time from its scheduled send
// to its handler. Redeliveries keep the first figure.
type latencies struct {
	start    time.Time
	interval time.Duration
	d        []time.Duration
	seen     []atomic.Bool
	got      atomic.Int64
	done     chan struct{}
}

func newLatencies(n int) *latencies {
	return &latencies{interval: time.Second / natsRate, d: make([]time.Duration, n), seen: make([]atomic.Bool, n), done: make(chan struct{})}
}

func (l *latencies) scheduled(i int) time.Time { return l.start.Add(time.Duration(i) * l.interval) }

// record notes the arrival of the message carrying p.
func (l *latencies) record(p []byte) {
	now := time.Now()
	i := int(binary.BigEndian.Uint64(p))
	if i >= len(l.d) || l.seen[i].Swap(true) {
		return
	}
	l.d[i] = now.Sub(l.scheduled(i))
	if l.got.Add(1) == int64(len(l.d)) {
		close(l.done)
	}
}

// pace publishes len(l.d) messages at natsRate through natsRateSender
// goroutines calling publish with one message each, then waits until
// every message was handled.
func (l *latencies) pace(b *testing.B, publish func(p []byte) error) {
	n := len(l.d)
	todo := make(chan int, n)
	var wg sync.WaitGroup
	for range natsRateSender {
		wg.Go(func() {
			for i := range todo {
				p := payload()
				binary.BigEndian.PutUint64(p, uint64(i))
				if err := publish(p); err != nil {
					b.Errorf("publish: %v", err)
				}
			}
		})
	}
	l.start = time.Now().Add(time.Millisecond)
	for i := range n {
		if d := time.Until(l.scheduled(i)); d > 0 {
			time.Sleep(d)
		}
		todo <- i
	}
	close(todo)
	wg.Wait()
	select {
	case <-l.done:
	case <-time.After(natsWait):
		b.Fatalf("latency: %d of %d handled after %v", l.got.Load(), n, natsWait)
	}
}

func (e *natsEnv) rawLatency(n int) []time.Duration {
	stream, subject := e.rawStream("lat")
	ctx, cancel := context.WithTimeout(context.Background(), natsWait)
	defer cancel()
	cons := e.rawConsumer(ctx, stream)
	l := newLatencies(n)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		l.record(m.Data())
		if err := m.Ack(); err != nil {
			e.b.Errorf("raw ack: %v", err)
		}
	})
	if err != nil {
		e.b.Fatalf("raw consume: %v", err)
	}
	defer cc.Stop()
	l.pace(e.b, func(p []byte) error {
		_, err := e.js.PublishMsg(ctx, rawMsg(subject, p))
		return err
	})
	return l.d
}

func (e *natsEnv) busLatency(n int) []time.Duration {
	topic := e.busTopic("lat")
	ctx, cancel := context.WithTimeout(context.Background(), natsWait)
	defer cancel()
	if err := e.bus.Publish(ctx, topic, &bus.Message{Payload: []byte("create the stream")}); err != nil {
		e.b.Fatalf("bus publish: %v", err)
	}
	l := newLatencies(n)
	sub, err := e.bus.Subscribe(ctx, topic, func(_ context.Context, d *bus.Delivery) error {
		if len(d.Payload) == natsPayload {
			l.record(d.Payload)
		}
		return nil
	}, bus.WithGroup("g"), bus.WithMaxInFlight(natsInFlight))
	if err != nil {
		e.b.Fatalf("bus subscribe: %v", err)
	}
	defer e.closeSub(sub)
	l.pace(e.b, func(p []byte) error {
		return e.bus.Publish(ctx, topic, &bus.Message{Payload: p})
	})
	return l.d
}

func percentile(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

func BenchmarkNATSLatency5k(b *testing.B) {
	e := newNATSEnv(b)
	n := int(natsRate * natsRateFor / time.Second)
	var raw, bs []time.Duration
	for round := 0; b.Loop(); round++ {
		if round%2 == 0 {
			raw = append(raw, e.rawLatency(n)...)
			bs = append(bs, e.busLatency(n)...)
		} else {
			bs = append(bs, e.busLatency(n)...)
			raw = append(raw, e.rawLatency(n)...)
		}
	}
	if len(raw) == 0 {
		return
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(percentile(raw, 0.5)), "raw-p50-ms")
	b.ReportMetric(ms(percentile(raw, 0.99)), "raw-p99-ms")
	b.ReportMetric(ms(percentile(bs, 0.5)), "bus-p50-ms")
	b.ReportMetric(ms(percentile(bs, 0.99)), "bus-p99-ms")
	b.ReportMetric(float64(percentile(bs, 0.99))/float64(percentile(raw, 0.99)), "p99-bus/raw")
	b.ReportMetric(0, "ns/op")
}
