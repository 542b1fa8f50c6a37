package bench

// Redis Streams: the bus against raw go-redis doing the same work, in one
// run, so the ratios compare like with like on the same machine and server.
//
//	go test ./internal/bench -run '^$' -bench Redis -benchtime 5x
//
// Each iteration runs the raw client and the bus over redisRound messages
// of 256 bytes, alternating which goes first (publish alternates in ten
// chunks), so load from elsewhere on the machine hits both alike; the
// benchmark reports both rates and bus/raw. Use -benchtime 10x or more on a
// busy machine.
// The server is a private redis-server, or the one at $BUS_REDIS_URL;
// every key gets a unique prefix and is deleted afterwards.
//
//   - PublishBatch: pipelined XADD in batches of 16, one round trip per
//     batch; the raw entries carry an id field and the payload, the bus's
//     its usual fields (id, publish time, payload).
//   - ConsumeAck: drain a prefilled stream with a new consumer group; raw
//     XREADGROUP COUNT 100 and one XACK per batch; the bus subscribes with
//     AckOnSuccess and redisInFlight in flight.
//   - E2E: one publisher (batches of 16) and one consumer at once; the
//     figure counts until the consumer handled every message.
//   - BacklogPeakHeap: the bus consumes a backlog of 500k messages (50k
//     with -short) and reports the peak heap, which is bounded by max in
//     flight times message size, not by the backlog.

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	bus "github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/cputime"
	"github.com/eventbus-go/bus/internal/redistest"
	"github.com/eventbus-go/bus/redisstream"
)

const (
	redisPayloadSize = 256
	redisBatch       = 16
	redisReadCount   = 100
	redisInFlight    = 256
	redisWait        = 2 * time.Minute
)

func redisRound() int {
	if testing.Short() {
		return 5_000
	}
	return 50_000
}

// redisEnv is one benchmark's server, raw client and bus.
type redisEnv struct {
	b      *testing.B
	client *redis.Client
	bus    *bus.Bus
	prefix string // key prefix of everything this benchmark made
	n      int
}

func newRedisEnv(b *testing.B) *redisEnv {
	b.Helper()
	opts, err := redis.ParseURL(redistest.URL(b))
	if err != nil {
		b.Fatalf("parse url: %v", err)
	}
	e := &redisEnv{b: b, client: redis.NewClient(opts), prefix: fmt.Sprintf("bench%d", time.Now().UnixNano())}
	be, err := redisstream.New(e.client, &redisstream.Options{Prefix: e.prefix})
	if err != nil {
		b.Fatalf("bus backend: %v", err)
	}
	e.bus = bus.New(be)
	b.Cleanup(e.close)
	return e
}

func (e *redisEnv) close() {
	ctx, cancel := context.WithTimeout(context.Background(), redisWait)
	defer cancel()
	if err := e.bus.Close(ctx); err != nil {
		e.b.Errorf("close the bus: %v", err)
	}
	iter := e.client.Scan(ctx, 0, e.prefix+":*", 1000).Iterator()
	for iter.Next(ctx) {
		e.client.Del(ctx, iter.Val())
	}
	if err := iter.Err(); err != nil {
		e.b.Errorf("delete benchmark keys: %v", err)
	}
	_ = e.client.Close()
}

// rawStream returns a fresh raw stream key, in the bus's key namespace so
// cleanup finds it.
func (e *redisEnv) rawStream(label string) string {
	e.n++
	return fmt.Sprintf("%s:raw-%s-%d", e.prefix, label, e.n)
}

func (e *redisEnv) busTopic(label string) string {
	e.n++
	return fmt.Sprintf("bench.%s%d", label, e.n)
}

func redisPayload() []byte { return benchPayload(redisPayloadSize) }

// rawPublish adds n entries with pipelined XADD, one round trip per batch
// of 16.
func (e *redisEnv) rawPublish(stream string, n int) {
	ctx := context.Background()
	data := redisPayload()
	pipe := e.client.Pipeline()
	args := make([]redis.XAddArgs, redisBatch)
	for sent := 0; sent < n; {
		k := min(redisBatch, n-sent)
		for i := range k {
			args[i] = redis.XAddArgs{Stream: stream, Values: []any{"id", strconv.Itoa(sent + i), "p", data}}
			pipe.XAdd(ctx, &args[i])
		}
		if _, err := pipe.Exec(ctx); err != nil {
			e.b.Fatalf("raw publish: %v", err)
		}
		sent += k
	}
}

func (e *redisEnv) busPublish(topic string, n int) {
	busPublishBatches(e.b, e.bus, topic, n, redisBatch, redisPayload())
}

// rawConsume drains n entries with a new group: XREADGROUP COUNT 100 on a
// client of its own, one XACK per batch.
func (e *redisEnv) rawConsume(stream string, n int) {
	ctx, cancel := context.WithTimeout(context.Background(), redisWait)
	defer cancel()
	if err := e.client.XGroupCreateMkStream(ctx, stream, "raw", "0").Err(); err != nil {
		e.b.Fatalf("raw group: %v", err)
	}
	ro := *e.client.Options()
	ro.PushNotificationProcessor = nil
	reader := redis.NewClient(&ro)
	defer reader.Close()
	ids := make([]string, 0, redisReadCount)
	for got := 0; got < n; {
		res, err := reader.XReadGroup(ctx, &redis.XReadGroupArgs{
			Group: "raw", Consumer: "c", Streams: []string{stream, ">"}, Count: redisReadCount, Block: time.Second,
		}).Result()
		if err != nil {
			e.b.Fatalf("raw read after %d of %d: %v", got, n, err)
		}
		ids = ids[:0]
		for _, m := range res[0].Messages {
			ids = append(ids, m.ID)
		}
		if err := e.client.XAck(ctx, stream, "raw", ids...).Err(); err != nil {
			e.b.Fatalf("raw ack: %v", err)
		}
		got += len(ids)
	}
}

// busConsume drains n messages with a new group from the oldest.
func (e *redisEnv) busConsume(topic string, n int) {
	ctx, cancel := context.WithTimeout(context.Background(), redisWait)
	defer cancel()
	var got atomic.Int64
	done := make(chan struct{})
	sub, err := e.bus.Subscribe(ctx, topic, func(context.Context, *bus.Delivery) error {
		if got.Add(1) == int64(n) {
			close(done)
		}
		return nil
	}, bus.WithGroup("g"), bus.WithStartFrom(bus.StartOldest), bus.WithMaxInFlight(redisInFlight))
	if err != nil {
		e.b.Fatalf("bus subscribe: %v", err)
	}
	select {
	case <-done:
	case <-ctx.Done():
		e.b.Fatalf("bus consume: %d of %d after %v", got.Load(), n, redisWait)
	}
	// Closing flushes the last acks; it is part of the work.
	if err := sub.Close(ctx); err != nil {
		e.b.Errorf("bus close subscription: %v", err)
	}
}

// redisRates accumulates the wall and CPU time each side spent.
type redisRates struct {
	raw, bus       time.Duration
	rawCPU, busCPU time.Duration
	msgs           int
}

func (r *redisRates) report(b *testing.B) {
	if r.raw == 0 || r.bus == 0 {
		return
	}
	rawRate := float64(r.msgs) / r.raw.Seconds()
	busRate := float64(r.msgs) / r.bus.Seconds()
	b.ReportMetric(rawRate, "raw-msgs/s")
	b.ReportMetric(busRate, "bus-msgs/s")
	b.ReportMetric(busRate/rawRate, "bus/raw")
	if r.rawCPU > 0 && r.busCPU > 0 {
		// Client CPU (this process; the server is another) per message.
		b.ReportMetric(float64(r.rawCPU.Nanoseconds())/float64(r.msgs), "raw-cpu-ns/msg")
		b.ReportMetric(float64(r.busCPU.Nanoseconds())/float64(r.msgs), "bus-cpu-ns/msg")
	}
	b.ReportMetric(0, "ns/op")
}

func redisTimed(d *time.Duration, f func()) {
	start := time.Now()
	f()
	*d += time.Since(start)
}

// timedSide runs f and adds its wall and process CPU time to one side.
func (r *redisRates) timedSide(bus bool, f func()) {
	c0 := cputime.Process()
	if bus {
		redisTimed(&r.bus, f)
		r.busCPU += cputime.Process() - c0
		return
	}
	redisTimed(&r.raw, f)
	r.rawCPU += cputime.Process() - c0
}

func BenchmarkRedisPublishBatch(b *testing.B) {
	e := newRedisEnv(b)
	stream := e.rawStream("pub")
	topic := e.busTopic("pub")
	n := redisRound()
	const chunks = 10 // raw and bus alternate, so load bursts hit both alike
	var r redisRates
	for b.Loop() {
		for c := range chunks {
			raw := func() { r.timedSide(false, func() { e.rawPublish(stream, n/chunks) }) }
			bus := func() { r.timedSide(true, func() { e.busPublish(topic, n/chunks) }) }
			if c%2 == 0 {
				raw()
				bus()
			} else {
				bus()
				raw()
			}
		}
		r.msgs += n / chunks * chunks
		b.StopTimer()
		e.client.Del(context.Background(), stream, e.prefix+":{"+topic+"}")
		b.StartTimer()
	}
	r.report(b)
}

func BenchmarkRedisConsumeAck(b *testing.B) {
	e := newRedisEnv(b)
	n := redisRound()
	var r redisRates
	for b.Loop() {
		b.StopTimer()
		stream := e.rawStream("con")
		e.rawPublish(stream, n)
		topic := e.busTopic("con")
		e.busPublish(topic, n)
		b.StartTimer()
		raw := func() { r.timedSide(false, func() { e.rawConsume(stream, n) }) }
		bus := func() { r.timedSide(true, func() { e.busConsume(topic, n) }) }
		if r.msgs/n%2 == 0 { // alternate the order between iterations
			raw()
			bus()
		} else {
			bus()
			raw()
		}
		r.msgs += n
		b.StopTimer()
		e.client.Del(context.Background(), stream, e.prefix+":{"+topic+"}")
		b.StartTimer()
	}
	r.report(b)
}

func BenchmarkRedisE2E(b *testing.B) {
	e := newRedisEnv(b)
	n := redisRound()
	var r redisRates
	for b.Loop() {
		b.StopTimer()
		stream := e.rawStream("e2e")
		topic := e.busTopic("e2e")
		b.StartTimer()
		raw := func() {
			pubDone := make(chan struct{})
			// The group exists before publishing starts, as with the bus.
			if err := e.client.XGroupCreateMkStream(context.Background(), stream, "raw", "$").Err(); err != nil {
				b.Fatalf("raw group: %v", err)
			}
			go func() { defer close(pubDone); e.rawPublish(stream, n) }()
			e.rawConsumeExisting(stream, n)
			<-pubDone
		}
		bus := func() {
			subscribed := make(chan struct{})
			pubDone := make(chan struct{})
			go func() {
				defer close(pubDone)
				<-subscribed
				e.busPublish(topic, n)
			}()
			e.busConsumeSignal(topic, n, subscribed)
			<-pubDone
		}
		if r.msgs/n%2 == 0 { // alternate the order between iterations
			r.timedSide(false, raw)
			r.timedSide(true, bus)
		} else {
			r.timedSide(true, bus)
			r.timedSide(false, raw)
		}
		r.msgs += n
		b.StopTimer()
		e.client.Del(context.Background(), stream, e.prefix+":{"+topic+"}")
		b.StartTimer()
	}
	r.report(b)
}

// rawConsumeExisting is rawConsume on a group that already exists.
func (e *redisEnv) rawConsumeExisting(stream string, n int) {
	ctx, cancel := context.WithTimeout(context.Background(), redisWait)
	defer cancel()
	ro := *e.client.Options()
	ro.PushNotificationProcessor = nil
	reader := redis.NewClient(&ro)
	defer reader.Close()
	ids := make([]string, 0, redisReadCount)
	for got := 0; got < n; {
		res, err := reader.XReadGroup(ctx, &redis.XReadGroupArgs{
			Group: "raw", Consumer: "c", Streams: []string{stream, ">"}, Count: redisReadCount, Block: time.Second,
		}).Result()
		if err == redis.Nil {
			continue
		}
		if err != nil {
			e.b.Fatalf("raw read after %d of %d: %v", got, n, err)
		}
		ids = ids[:0]
		for _, m := range res[0].Messages {
			ids = append(ids, m.ID)
		}
		if err := e.client.XAck(ctx, stream, "raw", ids...).Err(); err != nil {
			e.b.Fatalf("raw ack: %v", err)
		}
		got += len(ids)
	}
}

// busConsumeSignal subscribes (newest), closes subscribed, and drains n.
func (e *redisEnv) busConsumeSignal(topic string, n int, subscribed chan<- struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), redisWait)
	defer cancel()
	var got atomic.Int64
	done := make(chan struct{})
	sub, err := e.bus.Subscribe(ctx, topic, func(context.Context, *bus.Delivery) error {
		if got.Add(1) == int64(n) {
			close(done)
		}
		return nil
	}, bus.WithGroup("g"), bus.WithMaxInFlight(redisInFlight))
	if err != nil {
		e.b.Fatalf("bus subscribe: %v", err)
	}
	close(subscribed)
	select {
	case <-done:
	case <-ctx.Done():
		e.b.Fatalf("bus consume: %d of %d after %v", got.Load(), n, redisWait)
	}
	if err := sub.Close(ctx); err != nil {
		e.b.Errorf("bus close subscription: %v", err)
	}
}

// BenchmarkRedisBacklogPeakHeap consumes a large backlog with the bus and
// reports the peak heap in use while it does.
func BenchmarkRedisBacklogPeakHeap(b *testing.B) {
	e := newRedisEnv(b)
	n := 500_000
	if testing.Short() {
		n = 50_000
	}
	for b.Loop() {
		b.StopTimer()
		topic := e.busTopic("backlog")
		e.busPublish(topic, n)
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		base := ms.HeapInuse
		var peak atomic.Uint64
		stop := make(chan struct{})
		sampled := make(chan struct{})
		go func() {
			defer close(sampled)
			t := time.NewTicker(5 * time.Millisecond)
			defer t.Stop()
			var ms runtime.MemStats
			for {
				runtime.ReadMemStats(&ms)
				if ms.HeapInuse > peak.Load() {
					peak.Store(ms.HeapInuse)
				}
				select {
				case <-stop:
					return
				case <-t.C:
				}
			}
		}()
		b.StartTimer()
		start := time.Now()
		e.busConsume(topic, n)
		elapsed := time.Since(start)
		b.StopTimer()
		close(stop)
		<-sampled
		b.ReportMetric(float64(peak.Load())/(1<<20), "peak-heap-MB")
		b.ReportMetric(float64(peak.Load()-min(base, peak.Load()))/(1<<20), "peak-heap-growth-MB")
		b.ReportMetric(float64(n)/elapsed.Seconds(), "bus-msgs/s")
		b.ReportMetric(float64(n), "backlog")
		b.ReportMetric(0, "ns/op")
		e.client.Del(context.Background(), e.prefix+":{"+topic+"}")
		b.StartTimer()
	}
}
