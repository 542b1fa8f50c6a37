package brokers

// Redis Streams: the bus against raw go-redis doing the same work, in one
// run, so the ratios compare like with like on the same machine and server.
//
//	go test ./internal/bench/brokers -run '^$' -bench Redis -benchtime 5x
//
// Each iteration runs the raw client and the bus over redisRound messages
// of 256 bytes, alternating which goes first (publish alternates in ten
// chunks), so load from elsewhere on the machine hits both alike; the
// benchmark reports both rates and bus/raw. Use -benchtime 10x or more on a
// busy machine. Next to the rates it reports each side's CPU time per
// message: the client's (this process) and, where the server answers INFO
// CPU, the server's, which shares the machine's cores with the client.
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
//   - PublishParallel: 16 goroutines publish one message per call; the
//     raw baselines are the same pattern with go-redis (one XADD per
//     call, waiting for it: bus/raw) and one goroutine pipelining batches
//     of 16 (bus/raw-pipe).
//   - Latency5k: a publisher paced at 5,000 msgs/s, one message per call,
//     on a fixed schedule; raw XADD with an XREADGROUP BLOCK consumer
//     that XACKs each batch, against the bus with AckOnSuccess; p50 and
//     p99 of publish-call-to-handler latency and the p99 ratio.
//   - BacklogPeakHeap: the bus consumes a backlog of 500k messages (50k
//     with -short) and reports the peak heap, which is bounded by max in
//     flight times message size, not by the backlog.

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	bus "github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/cputime"
	"github.com/eventbus-go/bus/internal/rawclient"
	"github.com/eventbus-go/bus/internal/testkit/benchload"
	"github.com/eventbus-go/bus/internal/testkit/redistest"
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
	opts := redistest.Options(b)
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

func redisPayload() []byte { return benchload.Payload(redisPayloadSize) }

// rawPublish adds n entries with the raw baseline's publisher
// (rawclient.RedisPublisher): one pipeline of XADDs per batch of 16.
func (e *redisEnv) rawPublish(stream string, n int) {
	ctx := context.Background()
	data := redisPayload()
	p := rawclient.NewRedisPublisher(e.client, stream, redisBatch)
	batch := make([][]byte, redisBatch)
	for i := range batch {
		batch[i] = data
	}
	for sent := 0; sent < n; {
		k := min(redisBatch, n-sent)
		if err := p.Publish(ctx, batch[:k]); err != nil {
			e.b.Fatalf("raw publish: %v", err)
		}
		sent += k
	}
}

func (e *redisEnv) busPublish(topic string, n int) {
	busPublishBatches(e.b, e.bus, topic, n, redisBatch, redisPayload())
}

// rawConsume drains n entries with a new group.
func (e *redisEnv) rawConsume(stream string, n int) {
	ctx, cancel := context.WithTimeout(context.Background(), redisWait)
	defer cancel()
	if err := e.client.XGroupCreateMkStream(ctx, stream, "raw", "0").Err(); err != nil {
		e.b.Fatalf("raw group: %v", err)
	}
	e.rawConsumeExisting(stream, n)
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
	}, bus.WithGroup("g"), bus.WithStartFrom(backend.StartOldest), bus.WithMaxInFlight(redisInFlight))
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

// redisRates accumulates the wall and CPU time each side spent, the
// server's CPU time included when srv can read it.
type redisRates struct {
	raw, bus       time.Duration
	rawCPU, busCPU time.Duration
	rawSrv, busSrv time.Duration
	srv            *redis.Client // nil: no server CPU figures (or INFO failed)
	msgs           int
}

// serverCPU returns the CPU time the server has used (INFO CPU), or false
// when the server will not say (a server whose ACL refuses INFO).
func serverCPU(c *redis.Client) (time.Duration, bool) {
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		return 0, false
	}
	var total time.Duration
	found := 0
	for line := range strings.SplitSeq(info, "\r\n") {
		name, val, ok := strings.Cut(line, ":")
		if !ok || name != "used_cpu_sys" && name != "used_cpu_user" {
			continue
		}
		sec, err := strconv.ParseFloat(val, 64)
		if err != nil {
			return 0, false
		}
		total += time.Duration(sec * float64(time.Second))
		found++
	}
	return total, found == 2
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
	if r.srv != nil && r.rawSrv > 0 && r.busSrv > 0 {
		// Server CPU per message: what each side cost the broker, which
		// shares the machine's cores with the client.
		b.ReportMetric(float64(r.rawSrv.Nanoseconds())/float64(r.msgs), "raw-srv-cpu-ns/msg")
		b.ReportMetric(float64(r.busSrv.Nanoseconds())/float64(r.msgs), "bus-srv-cpu-ns/msg")
	}
	b.ReportMetric(0, "ns/op")
}

func redisTimed(d *time.Duration, f func()) {
	start := time.Now()
	f()
	*d += time.Since(start)
}

// timedSide runs f and adds its wall, process CPU and server CPU time to
// one side.
func (r *redisRates) timedSide(bus bool, f func()) {
	s0, srvOK := r.serverCPU()
	c0 := cputime.Process()
	wall, cpu, srv := &r.raw, &r.rawCPU, &r.rawSrv
	if bus {
		wall, cpu, srv = &r.bus, &r.busCPU, &r.busSrv
	}
	redisTimed(wall, f)
	*cpu += cputime.Process() - c0
	if s1, ok := r.serverCPU(); srvOK && ok {
		*srv += s1 - s0
	}
}

// serverCPU is serverCPU of r.srv; after a failure r reports no server
// figures.
func (r *redisRates) serverCPU() (time.Duration, bool) {
	if r.srv == nil {
		return 0, false
	}
	d, ok := serverCPU(r.srv)
	if !ok {
		r.srv = nil
	}
	return d, ok
}

func BenchmarkRedisPublishBatch(b *testing.B) {
	e := newRedisEnv(b)
	stream := e.rawStream("pub")
	topic := e.busTopic("pub")
	n := redisRound()
	const chunks = 10 // raw and bus alternate, so load bursts hit both alike
	r := redisRates{srv: e.client}
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
	r := redisRates{srv: e.client}
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
	r := redisRates{srv: e.client}
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

// rawConsumeExisting drains n entries of the existing group "raw" with
// the raw baseline's reader (rawclient.RedisReader): XREADGROUP COUNT 100
// on a client of its own, one XACK per read.
func (e *redisEnv) rawConsumeExisting(stream string, n int) {
	ctx, cancel := context.WithTimeout(context.Background(), redisWait)
	defer cancel()
	ro := *e.client.Options()
	ro.PushNotificationProcessor = nil
	reader := redis.NewClient(&ro)
	defer reader.Close()
	got := 0
	r := rawclient.RedisReader{Client: reader, Acker: e.client, Key: stream, Group: "raw", Consumer: "c", Count: redisReadCount, Block: time.Second}
	if err := r.Run(ctx, func([]byte) { got++ }, func() bool { return got >= n }); err != nil {
		e.b.Fatalf("raw read after %d of %d: %v", got, n, err)
	}
	if got < n {
		e.b.Fatalf("raw read: %d of %d after %v", got, n, redisWait)
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

// redisPublishers is how many goroutines publish one message per call in
// BenchmarkRedisPublishParallel, as a web service's request handlers do.
const redisPublishers = 16

// rawPublishEach adds n entries from redisPublishers goroutines, each
// sending one XADD and waiting for its reply before the next.
func (e *redisEnv) rawPublishEach(stream string, n int) {
	ctx := context.Background()
	data := redisPayload()
	if err := fanOut(n, redisPublishers, func(i int64) error {
		a := redis.XAddArgs{Stream: stream, Values: []any{"id", strconv.FormatInt(i, 10), "p", data}}
		return e.client.XAdd(ctx, &a).Err()
	}); err != nil {
		e.b.Fatalf("raw publish: %v", err)
	}
}

// busPublishEach publishes n messages from redisPublishers goroutines, one
// message (a new one, as a caller would build) per Publish call.
func (e *redisEnv) busPublishEach(topic string, n int) {
	ctx := context.Background()
	data := redisPayload()
	if err := fanOut(n, redisPublishers, func(int64) error {
		return e.bus.Publish(ctx, topic, &bus.Message{Payload: data})
	}); err != nil {
		e.b.Fatalf("bus publish: %v", err)
	}
}

// BenchmarkRedisPublishParallel publishes one message per call from
// redisPublishers goroutines through the bus, against two raw baselines
// in the same run: the same pattern with go-redis (each goroutine sends
// one XADD and waits for it; bus/raw), and one goroutine pipelining
// batches of 16 (bus/raw-pipe), the best a raw caller gets from one
// connection.
func BenchmarkRedisPublishParallel(b *testing.B) {
	e := newRedisEnv(b)
	stream := e.rawStream("ppub")
	pipeStream := e.rawStream("ppipe")
	topic := e.busTopic("ppub")
	n := redisRound()
	const chunks = 10
	r := redisRates{srv: e.client} // raw: one XADD per goroutine and call
	var pipe, pipeCPU time.Duration
	for b.Loop() {
		for c := range chunks {
			sides := []func(){
				func() { r.timedSide(false, func() { e.rawPublishEach(stream, n/chunks) }) },
				func() {
					c0 := cputime.Process()
					redisTimed(&pipe, func() { e.rawPublish(pipeStream, n/chunks) })
					pipeCPU += cputime.Process() - c0
				},
				func() { r.timedSide(true, func() { e.busPublishEach(topic, n/chunks) }) },
			}
			for i := range sides { // rotate which side goes first
				sides[(c+i)%len(sides)]()
			}
		}
		r.msgs += n / chunks * chunks
		b.StopTimer()
		e.client.Del(context.Background(), stream, pipeStream, e.prefix+":{"+topic+"}")
		b.StartTimer()
	}
	r.report(b)
	if pipe > 0 && r.bus > 0 {
		pipeRate := float64(r.msgs) / pipe.Seconds()
		b.ReportMetric(pipeRate, "raw-pipe-msgs/s")
		b.ReportMetric(float64(r.msgs)/r.bus.Seconds()/pipeRate, "bus/raw-pipe")
		b.ReportMetric(float64(pipeCPU.Nanoseconds())/float64(r.msgs), "raw-pipe-cpu-ns/msg")
	}
}

// Latency below saturation: a publisher paced at redisLatencyRate sends
// one message per call on a fixed schedule (message i of a chunk is due
// at the chunk's start + i/rate; a late publisher catches up instead of
// drifting), and each message's latency runs from the moment its publish
// call starts to the moment the consumer sees it. Both consumers run for
// the whole benchmark; the publisher alternates between raw and bus in
// chunks of redisLatencyChunk messages, so load from elsewhere on the
// machine hits both alike.
const (
	redisLatencyRate  = 5_000
	redisLatencyChunk = 500
	redisLatencyWarm  = 200 // messages per side before the measured ones
)

func redisLatencyMsgs() int {
	if testing.Short() {
		return 1_000
	}
	return 3_000
}

// redisLatencies records, per sequence number, when a message was sent
// and when it was received, in Unix nanoseconds.
type redisLatencies struct {
	sent, recv []atomic.Int64
	returned   []atomic.Int64 // when the publish call returned
	got        atomic.Int64
	done       chan struct{}
}

func newRedisLatencies(n int) *redisLatencies {
	return &redisLatencies{sent: make([]atomic.Int64, n), recv: make([]atomic.Int64, n), returned: make([]atomic.Int64, n), done: make(chan struct{})}
}

// received records the first receipt of message seq.
func (l *redisLatencies) received(seq uint64) {
	if seq >= uint64(len(l.recv)) || !l.recv[seq].CompareAndSwap(0, time.Now().UnixNano()) {
		return
	}
	if l.got.Add(1) == int64(len(l.recv)) {
		close(l.done)
	}
}

// wait waits until every message was received.
func (l *redisLatencies) wait(b *testing.B, side string) {
	select {
	case <-l.done:
	case <-time.After(redisWait):
		b.Fatalf("%s latency: %d of %d received after %v", side, l.got.Load(), len(l.recv), redisWait)
	}
}

// collect appends the latencies of every message, and the durations of
// their publish calls.
func (l *redisLatencies) collect(lat, pub []time.Duration) ([]time.Duration, []time.Duration) {
	for i := range l.sent {
		lat = append(lat, time.Duration(l.recv[i].Load()-l.sent[i].Load()))
		pub = append(pub, time.Duration(l.returned[i].Load()-l.sent[i].Load()))
	}
	return lat, pub
}

// redisPaced calls send for messages [from, to) of l at redisLatencyRate
// on a fixed schedule, recording the start of each call; the payload
// carries the sequence number.
func redisPaced(l *redisLatencies, from, to int, send func(i int, payload []byte)) {
	payload := redisPayload()
	start := time.Now()
	for i := from; i < to; i++ {
		due := start.Add(time.Duration(i-from) * time.Second / redisLatencyRate)
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
		binary.LittleEndian.PutUint64(payload, uint64(i))
		l.sent[i].Store(time.Now().UnixNano())
		send(i, payload)
		l.returned[i].Store(time.Now().UnixNano())
	}
}

// redisLatencySide is one side of the latency benchmark: a consumer that
// runs throughout and reports to the current recorder, and a send func.
type redisLatencySide struct {
	name string
	cur  atomic.Pointer[redisLatencies]
	send func(i int, payload []byte)
	stop func()
}

func (s *redisLatencySide) received(seq uint64) {
	if l := s.cur.Load(); l != nil {
		l.received(seq)
	}
}

// rawLatencySide publishes with XADD and consumes with XREADGROUP BLOCK on
// a client of its own, acking each batch with XACK before reading again.
func (e *redisEnv) rawLatencySide(b *testing.B) *redisLatencySide {
	ctx, cancel := context.WithCancel(context.Background())
	stream := e.rawStream("lat")
	if err := e.client.XGroupCreateMkStream(ctx, stream, "raw", "$").Err(); err != nil {
		b.Fatalf("raw group: %v", err)
	}
	ro := *e.client.Options()
	ro.PushNotificationProcessor = nil
	reader := redis.NewClient(&ro)
	side := &redisLatencySide{name: "raw"}
	consumed := make(chan error, 1)
	go func() {
		ids := make([]string, 0, redisReadCount)
		for ctx.Err() == nil {
			res, err := reader.XReadGroup(ctx, &redis.XReadGroupArgs{
				Group: "raw", Consumer: "c", Streams: []string{stream, ">"}, Count: redisReadCount, Block: 100 * time.Millisecond,
			}).Result()
			if err == redis.Nil {
				continue
			}
			if err != nil {
				if ctx.Err() != nil {
					break
				}
				consumed <- err
				return
			}
			ids = ids[:0]
			for _, m := range res[0].Messages {
				if p, ok := m.Values["p"].(string); ok && len(p) >= 8 {
					side.received(binary.LittleEndian.Uint64([]byte(p[:8])))
				}
				ids = append(ids, m.ID)
			}
			if err := e.client.XAck(ctx, stream, "raw", ids...).Err(); err != nil && ctx.Err() == nil {
				consumed <- err
				return
			}
		}
		consumed <- nil
	}()
	side.send = func(i int, payload []byte) {
		a := redis.XAddArgs{Stream: stream, Values: []any{"id", strconv.Itoa(i), "p", payload}}
		if err := e.client.XAdd(ctx, &a).Err(); err != nil {
			b.Fatalf("raw publish: %v", err)
		}
	}
	side.stop = func() {
		cancel()
		if err := <-consumed; err != nil {
			b.Errorf("raw consume: %v", err)
		}
		_ = reader.Close()
		e.client.Del(context.Background(), stream)
	}
	return side
}

// busLatencySide publishes through the bus and consumes with a
// subscription in AckOnSuccess.
func (e *redisEnv) busLatencySide(b *testing.B) *redisLatencySide {
	ctx := context.Background()
	topic := e.busTopic("lat")
	side := &redisLatencySide{name: "bus"}
	sub, err := e.bus.Subscribe(ctx, topic, func(_ context.Context, d *bus.Delivery) error {
		if len(d.Payload) >= 8 {
			side.received(binary.LittleEndian.Uint64(d.Payload))
		}
		return nil
	}, bus.WithGroup("g"), bus.WithMaxInFlight(redisInFlight))
	if err != nil {
		b.Fatalf("bus subscribe: %v", err)
	}
	side.send = func(_ int, payload []byte) {
		if err := e.bus.Publish(ctx, topic, &bus.Message{Payload: payload}); err != nil {
			b.Fatalf("bus publish: %v", err)
		}
	}
	side.stop = func() {
		cctx, cancel := context.WithTimeout(ctx, redisWait)
		defer cancel()
		if err := sub.Close(cctx); err != nil {
			b.Errorf("bus close subscription: %v", err)
		}
		e.client.Del(context.Background(), e.prefix+":{"+topic+"}")
	}
	return side
}

// redisPercentile returns the p-th percentile (0-100) of sorted.
func redisPercentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)*p/100, len(sorted)-1)]
}

// BenchmarkRedisLatency5k measures publish-to-handler latency below
// saturation: redisLatencyMsgs messages per side and iteration at 5,000
// msgs/s, one per publish call, through raw go-redis (XADD; XREADGROUP
// BLOCK and XACK) and through the bus (AckOnSuccess), in alternating
// chunks. It reports p50 and p99 of each side in microseconds, the p99
// ratio bus/raw, and the p50 of each side's publish call alone.
func BenchmarkRedisLatency5k(b *testing.B) {
	e := newRedisEnv(b)
	n := redisLatencyMsgs()
	sides := []*redisLatencySide{e.rawLatencySide(b), e.busLatencySide(b)}
	defer func() {
		for _, s := range sides {
			s.stop()
		}
	}()
	run := func(s *redisLatencySide, l *redisLatencies, from, to int) {
		s.cur.Store(l)
		redisPaced(l, from, to, s.send)
	}
	for _, s := range sides { // warm up connections and goroutines
		l := newRedisLatencies(redisLatencyWarm)
		run(s, l, 0, redisLatencyWarm)
		l.wait(b, s.name)
	}
	all := make([][]time.Duration, len(sides))
	pubs := make([][]time.Duration, len(sides))
	iter := 0
	for b.Loop() {
		ls := []*redisLatencies{newRedisLatencies(n), newRedisLatencies(n)}
		for c := 0; c < n; c += redisLatencyChunk {
			for k := range sides {
				i := (k + iter + c/redisLatencyChunk) % len(sides) // rotate which goes first
				run(sides[i], ls[i], c, min(c+redisLatencyChunk, n))
			}
		}
		for i, s := range sides {
			ls[i].wait(b, s.name)
			all[i], pubs[i] = ls[i].collect(all[i], pubs[i])
		}
		iter++
	}
	raw, bs := all[0], all[1]
	slices.Sort(raw)
	slices.Sort(bs)
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	for i, s := range sides {
		slices.Sort(pubs[i])
		b.ReportMetric(us(redisPercentile(pubs[i], 50)), s.name+"-publish-p50-µs")
	}
	b.ReportMetric(us(redisPercentile(raw, 50)), "raw-p50-µs")
	b.ReportMetric(us(redisPercentile(raw, 99)), "raw-p99-µs")
	b.ReportMetric(us(redisPercentile(bs, 50)), "bus-p50-µs")
	b.ReportMetric(us(redisPercentile(bs, 99)), "bus-p99-µs")
	if p := redisPercentile(raw, 99); p > 0 {
		b.ReportMetric(float64(redisPercentile(bs, 99))/float64(p), "p99-bus/raw")
	}
	b.ReportMetric(0, "ns/op")
}
