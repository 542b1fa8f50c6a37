package inmemory_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/inmemory"
	"github.com/eventbus-go/bus/internal/cputime"
	"github.com/eventbus-go/bus/observer"
)

const (
	benchBatch   = 100
	benchPayload = 256
)

func benchMsgs() *benchBatchMsgs {
	out := &benchBatchMsgs{ms: make([]*backend.Message, benchBatch)}
	now := time.Now()
	for i := range out.ms {
		out.ms[i] = &backend.Message{Payload: make([]byte, benchPayload), PublishedAt: now}
	}
	return out
}

// benchBatchMsgs is a batch that gets new IDs for every Publish (next): a
// topic stores a message whose ID it remembers once, so a batch published
// again with the same IDs would measure the dedup window dropping it.
type benchBatchMsgs struct {
	ms []*backend.Message
	n  int
}

// benchIDs are distinct message IDs, many more than a topic remembers
// (inmemory.DefaultMaxBacklog): reused in turn, none is remembered when
// it comes round again.
var benchIDs = func() []string {
	ids := make([]string, 4*inmemory.DefaultMaxBacklog)
	for i := range ids {
		ids[i] = fmt.Sprintf("0196a1b2-c3d4-7e5f-8a9b-%012x", i)
	}
	return ids
}()

func (b *benchBatchMsgs) next() []*backend.Message {
	for _, m := range b.ms {
		m.ID = benchIDs[b.n%len(benchIDs)]
		b.n++
	}
	return b.ms
}

func benchBackend(b *testing.B) *inmemory.Backend {
	be, err := inmemory.New(nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = be.Close() })
	return be
}

func benchSub(b *testing.B, be *inmemory.Backend, topic string) backend.Subscription {
	s, err := be.Subscribe(context.Background(), topic, backend.SubscribeConfig{Group: "g", AckTimeout: time.Minute, Observer: observer.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s
}

// cpuMeter measures the process CPU time of a benchmark loop.
type cpuMeter struct {
	start time.Duration
	ok    bool
}

func startCPU() cpuMeter {
	d := cputime.Process()
	return cpuMeter{start: d, ok: d > 0}
}

// reportRate reports msgs/s and ns/msg of wall time, and cpu-ns/msg: the
// CPU the whole process spent per message (all goroutines and the garbage
// collector), which a busy machine distorts much less than wall time.
func reportRate(b *testing.B, msgs int, cpu cpuMeter) {
	b.ReportMetric(float64(msgs)/b.Elapsed().Seconds(), "msgs/s")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(msgs), "ns/msg")
	if end := cputime.Process(); end > 0 && cpu.ok && msgs > 0 {
		b.ReportMetric(float64(end-cpu.start)/float64(msgs), "cpu-ns/msg")
	}
}

// BenchmarkPublishBatch publishes batches of 100 messages of 256 bytes to
// a topic without a group (it keeps the newest MaxBacklog entries).
func BenchmarkPublishBatch(b *testing.B) {
	be := benchBackend(b)
	ms := benchMsgs()
	ctx := context.Background()
	b.ReportAllocs()
	n := 0
	cpu := startCPU()
	for b.Loop() {
		if err := be.Publish(ctx, "bench", ms.next()); err != nil {
			b.Fatal(err)
		}
		n += len(ms.ms)
	}
	reportRate(b, n, cpu)
}

// BenchmarkPublishReceiveAck runs a batch through Publish, Receive and Ack
// on one goroutine: the backend's whole cost per message.
func BenchmarkPublishReceiveAck(b *testing.B) {
	be := benchBackend(b)
	s := benchSub(b, be, "bench")
	ms := benchMsgs()
	ctx := context.Background()
	acks := make([]backend.AckID, 0, benchBatch)
	b.ReportAllocs()
	n := 0
	cpu := startCPU()
	for b.Loop() {
		if err := be.Publish(ctx, "bench", ms.next()); err != nil {
			b.Fatal(err)
		}
		got, err := s.Receive(ctx, benchBatch)
		if err != nil || len(got) != benchBatch {
			b.Fatalf("receive: %d, %v", len(got), err)
		}
		acks = acks[:0]
		for _, m := range got {
			acks = append(acks, m.AckID)
		}
		if err := s.Ack(ctx, acks); err != nil {
			b.Fatal(err)
		}
		n += len(got)
	}
	reportRate(b, n, cpu)
}

// BenchmarkPipeline publishes batches on one goroutine while another
// receives and acks them, as the bus does.
func BenchmarkPipeline(b *testing.B) {
	be := benchBackend(b)
	s := benchSub(b, be, "bench")
	ms := benchMsgs()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	received := make(chan int, 1)
	want := make(chan int, 1)
	go func() {
		acks := make([]backend.AckID, 0, 256)
		total, target := 0, -1
		for target < 0 || total < target {
			select {
			case target = <-want:
			default:
			}
			got, err := s.Receive(ctx, 256)
			if err != nil {
				break
			}
			acks = acks[:0]
			for _, m := range got {
				acks = append(acks, m.AckID)
			}
			_ = s.Ack(ctx, acks)
			total += len(got)
		}
		received <- total
	}()
	b.ReportAllocs()
	n := 0
	cpu := startCPU()
	for b.Loop() {
		if err := be.Publish(ctx, "bench", ms.next()); err != nil {
			b.Fatal(err)
		}
		n += len(ms.ms)
	}
	want <- n
	if got := <-received; got != n {
		b.Fatalf("received %d of %d", got, n)
	}
	reportRate(b, n, cpu)
}

// BenchmarkChannelBaseline moves the same messages through a buffered
// channel from one goroutine to another: the floor the pipeline is
// compared with.
func BenchmarkChannelBaseline(b *testing.B) {
	ms := benchMsgs()
	ch := make(chan *backend.Message, 1024)
	done := make(chan int)
	go func() {
		n := 0
		for range ch {
			n++
		}
		done <- n
	}()
	n := 0
	cpu := startCPU()
	for b.Loop() {
		for _, m := range ms.ms {
			ch <- m
		}
		n += len(ms.ms)
	}
	close(ch)
	if got := <-done; got != n {
		b.Fatalf("received %d of %d", got, n)
	}
	reportRate(b, n, cpu)
}
