package bench

// The bus on mem:// against a plain buffered Go channel pipeline, in one
// run:
//
//	go test ./internal/bench -run '^$' -bench MemE2EVsChannel -benchtime 5x
//
// Both sides move chanRound messages of 256 bytes from one producer
// goroutine to a consumer that reads each payload's sequence number. The
// channel side is the baseline of `bus bench --baseline` on mem://
// (gochan.Channel): it copies each payload per send (the work an
// in-process broker must do at the least: it cannot keep the publisher's
// buffer), in batches of chanBatch; the bus side publishes in batches of chanBatch with
// AckOnSuccess and chanInFlight in flight, and counts until every message
// was handled. The sides alternate which goes first in each iteration.

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	bus "github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/cputime"
	"github.com/eventbus-go/bus/internal/rawclient/gochan"
	"github.com/eventbus-go/bus/internal/testkit/benchload"
)

const (
	chanPayloadSize = 256
	chanBuffer      = 1024
	chanBatch       = 16
	chanInFlight    = 256
	chanWait        = 2 * time.Minute
)

func chanRound() int {
	if testing.Short() {
		return 20_000
	}
	return 200_000
}

// runChannelPipeline moves n messages through the raw baseline of
// mem:// (gochan.Channel), published in batches of chanBatch from one
// goroutine, and returns when the consumer has read them all.
func runChannelPipeline(n int) {
	src := benchload.Payload(chanPayloadSize)
	ch := gochan.New(chanBuffer)
	stop := make(chan struct{})
	published := make(chan error, 1)
	go func() {
		batch := make([][]byte, chanBatch)
		for i := range batch {
			batch[i] = make([]byte, chanPayloadSize)
		}
		for sent := 0; sent < n; {
			k := min(chanBatch, n-sent)
			for i := range k {
				copy(batch[i], src)
				binary.LittleEndian.PutUint64(batch[i], uint64(sent+i))
			}
			if err := ch.Publish(context.Background(), batch[:k]); err != nil {
				published <- err
				return
			}
			sent += k
		}
		published <- nil
	}()
	var sum uint64
	got := 0
	ch.Consume(stop, func(p []byte) {
		sum += binary.LittleEndian.Uint64(p)
		if got++; got == n {
			close(stop)
		}
	})
	if err := <-published; err != nil {
		panic(fmt.Sprintf("channel pipeline: publish: %v", err))
	}
	if want := uint64(n) * uint64(n-1) / 2; sum != want {
		panic(fmt.Sprintf("channel pipeline: sequence sum %d, want %d", sum, want))
	}
}

// runBusE2E subscribes to a fresh topic on b, publishes n messages from one
// goroutine in batches and returns when the handler has seen them all. It
// returns the tail: how long after the last Publish returned the last
// message was handled, which is short when the consumer keeps up with the
// publisher.
func runBusE2E(b *testing.B, bs *bus.Bus, topic string, n int) time.Duration {
	ctx := context.Background()
	c := newCounter(n)
	sub, err := bs.Subscribe(ctx, topic, c.handle, bus.WithMaxInFlight(chanInFlight))
	if err != nil {
		b.Fatalf("subscribe: %v", err)
	}
	pubErr := make(chan error, 1)
	var published time.Time // written before pubErr is sent
	go func() {
		err := benchload.PublishBatches(bs, topic, n, chanBatch, benchload.Payload(chanPayloadSize))
		published = time.Now()
		pubErr <- err
	}()
	c.wait(b, "bus e2e")
	handledAt := time.Now()
	if err := <-pubErr; err != nil {
		b.Fatalf("publish: %v", err)
	}
	if err := sub.Close(ctx); err != nil {
		b.Fatalf("close subscription: %v", err)
	}
	return max(handledAt.Sub(published), 0)
}

// counter is a handler that reads each payload's sequence number and
// counts deliveries up to n.
type counter struct {
	n       int64
	handled atomic.Int64
	done    chan struct{}
}

func newCounter(n int) *counter { return &counter{n: int64(n), done: make(chan struct{})} }

func (c *counter) handle(_ context.Context, d *bus.Delivery) error {
	_ = binary.LittleEndian.Uint64(d.Payload)
	if c.handled.Add(1) == c.n {
		close(c.done)
	}
	return nil
}

// wait returns once n deliveries were handled, and fails the benchmark
// after chanWait.
func (c *counter) wait(b *testing.B, what string) {
	select {
	case <-c.done:
	case <-time.After(chanWait):
		b.Fatalf("%s: %d of %d handled after %v", what, c.handled.Load(), c.n, chanWait)
	}
}

// sideCost adds up what one side of a comparison spent over its rounds.
type sideCost struct {
	wall, cpu time.Duration
	allocs    uint64
}

// measure runs one round of the side and adds its wall time, the
// process's CPU time and the heap allocations.
func (c *sideCost) measure(round func()) {
	start, cpu, allocs := time.Now(), cputime.Process(), mallocs()
	round()
	c.wall += time.Since(start)
	c.cpu += cputime.Process() - cpu
	c.allocs += mallocs() - allocs
}

func BenchmarkMemE2EVsChannel(b *testing.B) {
	bs := benchload.OpenBus(b, "mem://")
	round := chanRound()
	var chanSide, busSide sideCost
	iter := 0
	for b.Loop() {
		channel := func() { chanSide.measure(func() { runChannelPipeline(round) }) }
		bus := func() {
			busSide.measure(func() { runBusE2E(b, bs, fmt.Sprintf("bench.mem.e2e.%d", iter), round) })
		}
		// Alternate which side goes first, as the other comparisons do:
		// a side that runs right after the bus finds the heap pages the
		// bus's round faulted in still mapped, and one that runs after
		// the channel (which needs a few MB) must fault them in again.
		if iter%2 == 0 {
			channel()
			bus()
		} else {
			bus()
			channel()
		}
		iter++
	}
	msgs := float64(round * iter)
	chanRate := msgs / chanSide.wall.Seconds()
	busRate := msgs / busSide.wall.Seconds()
	b.ReportMetric(chanRate, "chan-msgs/s")
	b.ReportMetric(busRate, "bus-msgs/s")
	b.ReportMetric(busRate/chanRate, "bus/chan")
	// CPU per message (all goroutines, GC included): the cost side of the
	// ratio, which other load on the machine does not distort.
	b.ReportMetric(float64(chanSide.cpu.Nanoseconds())/msgs, "chan-cpu-ns/msg")
	b.ReportMetric(float64(busSide.cpu.Nanoseconds())/msgs, "bus-cpu-ns/msg")
	// Heap allocations per message, publish and consume together: what
	// the garbage collector has to keep up with at the default GOGC.
	b.ReportMetric(float64(chanSide.allocs)/msgs, "chan-allocs/msg")
	b.ReportMetric(float64(busSide.allocs)/msgs, "bus-allocs/msg")
}

// mallocs returns the number of heap allocations so far, all goroutines
// included.
func mallocs() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.Mallocs
}

// BenchmarkChannelPipeline is the channel side alone, for profiling.
func BenchmarkChannelPipeline(b *testing.B) {
	round := chanRound()
	for b.Loop() {
		runChannelPipeline(round)
	}
	b.ReportMetric(float64(round*b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkMemE2E is the bus side alone, for profiling:
//
//	go test ./internal/bench -run '^$' -bench 'MemE2E$' -benchtime 5x -cpuprofile cpu.out
func BenchmarkMemE2E(b *testing.B) {
	bs := benchload.OpenBus(b, "mem://")
	round := chanRound()
	iter := 0
	var cost sideCost
	var tail time.Duration
	for b.Loop() {
		cost.measure(func() { tail += runBusE2E(b, bs, fmt.Sprintf("bench.mem.e2e.%d", iter), round) })
		iter++
	}
	msgs := float64(round * iter)
	b.ReportMetric(msgs/b.Elapsed().Seconds(), "msgs/s")
	b.ReportMetric(float64(cost.allocs)/msgs, "allocs/msg")
	// CPU per message, all goroutines and the collector included.
	b.ReportMetric(float64(cost.cpu.Nanoseconds())/msgs, "cpu-ns/msg")
	// From the last Publish returning to the last message handled, per
	// round: near zero when the handlers keep up with the publisher
	// (the publisher is then what bounds the rate).
	b.ReportMetric(float64(tail.Microseconds())/1e3/float64(iter), "tail-ms")
}

// BenchmarkMemPublish is the publishing half of BenchmarkMemE2E alone: one
// goroutine publishes rounds to a topic no group reads (the topic keeps
// its newest max_backlog messages and drops older ones, so publishing
// never waits; one topic for every round, so the retained ones do not
// add up).
func BenchmarkMemPublish(b *testing.B) {
	bs := benchload.OpenBus(b, "mem://")
	round := chanRound()
	iter := 0
	for b.Loop() {
		if err := benchload.PublishBatches(bs, "bench.mem.pub", round, chanBatch, benchload.Payload(chanPayloadSize)); err != nil {
			b.Fatalf("publish: %v", err)
		}
		iter++
	}
	b.ReportMetric(float64(round*iter)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkMemConsume is the consuming half of BenchmarkMemE2E alone: a
// new group drains a topic prefilled with a round (prefilling is not
// timed), with AckOnSuccess and chanInFlight in flight.
func BenchmarkMemConsume(b *testing.B) {
	ctx := context.Background()
	round := chanRound()
	// Room for the whole round, so the prefill drops nothing.
	bs := benchload.OpenBus(b, fmt.Sprintf("mem://?max_backlog=%d&max_backlog_bytes=%d", round, round*1024))
	iter := 0
	var elapsed time.Duration
	for b.Loop() {
		topic := fmt.Sprintf("bench.mem.con.%d", iter)
		iter++
		if err := benchload.PublishBatches(bs, topic, round, chanBatch, benchload.Payload(chanPayloadSize)); err != nil {
			b.Fatalf("prefill: %v", err)
		}
		c := newCounter(round)
		start := time.Now()
		sub, err := bs.Subscribe(ctx, topic, c.handle, bus.WithStartFrom(backend.StartOldest), bus.WithMaxInFlight(chanInFlight))
		if err != nil {
			b.Fatalf("subscribe: %v", err)
		}
		c.wait(b, "bus consume")
		elapsed += time.Since(start)
		if err := sub.Close(ctx); err != nil {
			b.Fatalf("close subscription: %v", err)
		}
	}
	b.ReportMetric(float64(round*iter)/elapsed.Seconds(), "msgs/s")
}
