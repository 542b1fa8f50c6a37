package brokers

// Delay lateness: how late a redelivery comes after the delay its handler
// asked for, on mem, Redis and NATS, under load.
//
//	go test ./internal/bench/brokers -run '^$' -bench DelayLateness -benchtime 3x
//
// Each iteration publishes delayMsgs messages to a topic and gives each
// back delayRounds times, a third of them with Delivery.Nack(delay), a
// third by returning bus.Nack(err, delay) and a third by returning
// bus.Snooze(delay), each time with a delay drawn between delayMin and
// delayMin+delaySpread; meanwhile a publisher adds plain messages to the
// same topic at delayLoadRate msgs/s, which the same subscription
// handles. A redelivery's lateness is the time from the give-back plus
// its delay to the start of the next delivery. The benchmark reports
// p50, p99 and max lateness per kind in milliseconds, over all
// iterations, and fails on a redelivery that came early. The servers are
// those of the other benchmarks (a private one, or $BUS_REDIS_URL and
// $BUS_NATS_URL).

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	bus "github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/testkit/benchload"
)

const (
	delayMsgs     = 300
	delayRounds   = 3
	delayMin      = 50 * time.Millisecond
	delaySpread   = 300 * time.Millisecond
	delayLoadRate = 2_000
	delayWait     = time.Minute
)

// delayKinds are the ways a handler gives a delivery back with a delay.
var delayKinds = []string{"nack", "retry-after", "snooze"}

var errDelayRetry = errors.New("bench: retry later")

// delayState is what the handler knows of one delayed message.
type delayState struct {
	kind     int
	rounds   int
	gaveBack time.Time
	delay    time.Duration
}

// delayRun is one iteration's messages and what their redeliveries
// measured.
type delayRun struct {
	mu    sync.Mutex
	state map[string]*delayState
	late  [][]time.Duration // per kind
	early []string
	left  int
	done  chan struct{}
}

func newDelayRun(iter int) (*delayRun, []*bus.Message) {
	r := &delayRun{state: map[string]*delayState{}, late: make([][]time.Duration, len(delayKinds)), left: delayMsgs, done: make(chan struct{})}
	msgs := make([]*bus.Message, delayMsgs)
	for i := range msgs {
		id := fmt.Sprintf("delayed-%d-%d", iter, i)
		r.state[id] = &delayState{kind: i % len(delayKinds)}
		msgs[i] = &bus.Message{ID: id, Payload: []byte("delayed")}
	}
	return r, msgs
}

// handle measures a delivery of a delayed message and gives it back
// again, or acks it after its last round; plain messages are acked.
func (r *delayRun) handle(ctx context.Context, d *bus.Delivery) error {
	start := time.Now()
	r.mu.Lock()
	st, ok := r.state[d.ID]
	if !ok {
		r.mu.Unlock()
		return nil // load
	}
	if !st.gaveBack.IsZero() {
		late := start.Sub(st.gaveBack.Add(st.delay))
		r.late[st.kind] = append(r.late[st.kind], late)
		if late < 0 {
			r.early = append(r.early, fmt.Sprintf("%s by %s %v early", d.ID, delayKinds[st.kind], -late))
		}
		st.gaveBack = time.Time{}
	}
	if st.rounds == delayRounds {
		if r.left--; r.left == 0 {
			close(r.done)
		}
		r.mu.Unlock()
		return nil
	}
	st.rounds++
	delay := delayMin + rand.N(delaySpread)
	st.delay, st.gaveBack = delay, time.Now()
	kind := st.kind
	r.mu.Unlock()
	switch delayKinds[kind] {
	case "nack":
		return d.Nack(ctx, delay)
	case "retry-after":
		return bus.Nack(errDelayRetry, delay)
	default:
		return bus.Snooze(delay)
	}
}

// delayLoad publishes plain messages at delayLoadRate until stop closes.
func delayLoad(b *testing.B, bs *bus.Bus, topic string, stop <-chan struct{}) {
	const tick = 10 * time.Millisecond
	batch := make([]*bus.Message, delayLoadRate*int(tick)/int(time.Second))
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		for i := range batch {
			batch[i] = &bus.Message{Payload: []byte("load")}
		}
		if err := bs.Publish(context.Background(), topic, batch...); err != nil {
			b.Errorf("publish load: %v", err)
			return
		}
	}
}

// benchDelayLateness runs the delay lateness benchmark on bs.
func benchDelayLateness(b *testing.B, bs *bus.Bus, topic string) {
	ctx := context.Background()
	var cur struct {
		sync.Mutex
		r *delayRun
	}
	sub, err := bs.Subscribe(ctx, topic, func(ctx context.Context, d *bus.Delivery) error {
		cur.Lock()
		r := cur.r
		cur.Unlock()
		if r == nil {
			return nil
		}
		return r.handle(ctx, d)
	}, bus.WithGroup("g"), bus.WithMaxInFlight(256), bus.WithAckTimeout(30*time.Second), bus.WithMaxDeliveries(delayRounds+2))
	if err != nil {
		b.Fatalf("subscribe: %v", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(ctx, delayWait)
		defer cancel()
		if err := sub.Close(cctx); err != nil {
			b.Errorf("close the subscription: %v", err)
		}
	}()
	late := make([][]time.Duration, len(delayKinds))
	iter := 0
	for b.Loop() {
		r, msgs := newDelayRun(iter)
		iter++
		cur.Lock()
		cur.r = r
		cur.Unlock()
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() { delayLoad(b, bs, topic, stop) })
		if err := bs.Publish(ctx, topic, msgs...); err != nil {
			b.Fatalf("publish: %v", err)
		}
		select {
		case <-r.done:
		case <-time.After(delayWait):
			b.Fatalf("%d of %d delayed messages unfinished after %v", r.left, delayMsgs, delayWait)
		}
		close(stop)
		wg.Wait()
		r.mu.Lock()
		if len(r.early) > 0 {
			b.Errorf("%d redeliveries came before their delay, e.g. %s", len(r.early), r.early[0])
		}
		for k := range late {
			late[k] = append(late[k], r.late[k]...)
		}
		r.mu.Unlock()
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	for k, name := range delayKinds {
		slices.Sort(late[k])
		if len(late[k]) == 0 {
			continue
		}
		b.ReportMetric(ms(redisPercentile(late[k], 50)), name+"-p50-ms")
		b.ReportMetric(ms(redisPercentile(late[k], 99)), name+"-p99-ms")
		b.ReportMetric(ms(late[k][len(late[k])-1]), name+"-max-ms")
	}
	b.ReportMetric(0, "ns/op")
}

// BenchmarkDelayLateness reports how late delayed redeliveries come on
// each backend (see the top of this file).
func BenchmarkDelayLateness(b *testing.B) {
	b.Run("mem", func(b *testing.B) {
		benchDelayLateness(b, benchload.OpenBus(b, "mem://"), "bench.delay")
	})
	b.Run("redis", func(b *testing.B) {
		e := newRedisEnv(b)
		benchDelayLateness(b, e.bus, e.busTopic("delay"))
	})
	b.Run("nats", func(b *testing.B) {
		e := newNATSEnv(b)
		benchDelayLateness(b, e.bus, "bench.delay")
	})
}
