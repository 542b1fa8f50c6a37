package faultsuite

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	bus "github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/testkit/faultproxy"
)

// resetAt are the progress points (messages published or delivered) at
// which the reset cases reset their side.
var resetAt = []int{150, 300, 450}

// resetter resets p once for each signal on the returned channel, from a
// goroutine of its own so that resets land while calls are in flight. The
// returned function stops it and returns how many connections each reset
// closed.
func resetter(p *faultproxy.Proxy) (chan<- struct{}, func() []int) {
	signal := make(chan struct{}, len(resetAt))
	var closed []int
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range signal {
			// A client that fetched ahead may hold no connection for a
			// moment (it reconnects on its next request): the reset is
			// made again until it closes a connection, up to 10 s.
			deadline := time.Now().Add(10 * time.Second)
			n := p.Reset()
			for n == 0 && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond) // polling the proxy
				n = p.Reset()
			}
			closed = append(closed, n)
		}
	}()
	var once sync.Once
	return signal, func() []int {
		once.Do(func() { close(signal) })
		<-done
		return closed
	}
}

// recovered publishes 100 more messages once the fault is over and waits
// until they are delivered: the live subscriptions recovered by
// themselves.
func (e *env) recovered(pub *bus.Bus) {
	e.t.Helper()
	e.publishAll(pub, "after", 100, 25, callTimeout, nil)
	e.waitNoLoss("after the fault healed")
}

// testResetPublisherSide resets every connection of the publishing bus
// three times while 600 messages are published in batches of 25.
func testResetPublisherSide(e *env) {
	pubP, subP := e.proxy(), e.proxy()
	pub, consumer := e.bus(pubP), e.bus(subP)
	sub := e.consume(consumer, "consumer")

	signal, stop := resetter(pubP)
	e.publishAll(pub, "m", 600, 25, callTimeout, func(done int) {
		for _, at := range resetAt {
			if done == at {
				signal <- struct{}{}
			}
		}
	})
	closed := stop()
	e.waitNoLoss("after publisher-side resets")
	e.recovered(pub)

	e.t.Logf("connections closed by each reset: %v; publisher connections accepted: %d", closed, pubP.Accepted())
	require.Len(e.t, closed, len(resetAt), "every reset ran")
	for i, n := range closed {
		assert.Positive(e.t, n, "reset %d must hit a live publisher connection", i+1)
	}
	assert.Greater(e.t, pubP.Accepted(), int64(1), "the publisher reconnects after the resets")
	e.finish(sub)
}

// testResetConsumerSide resets every connection of the consuming bus three
// times while it works through 600 messages.
func testResetConsumerSide(e *env) {
	pubP, subP := e.proxy(), e.proxy()
	pub, consumer := e.bus(pubP), e.bus(subP)
	e.publishAll(pub, "m", 600, 50, callTimeout, nil)

	signal, stop := resetter(subP)
	var seen atomic.Int64
	sub := e.consumeWith(consumer, "consumer", func(context.Context, *bus.Delivery) error {
		n := int(seen.Add(1))
		for _, at := range resetAt {
			if n == at {
				signal <- struct{}{}
			}
		}
		return nil
	}, bus.WithMaxInFlight(16))
	e.waitNoLoss("after consumer-side resets")
	closed := stop()
	e.recovered(pub)

	e.t.Logf("connections closed by each reset: %v; consumer connections accepted: %d", closed, subP.Accepted())
	require.Len(e.t, closed, len(resetAt), "every reset ran")
	for i, n := range closed {
		assert.Positive(e.t, n, "reset %d must hit a live consumer connection", i+1)
	}
	assert.Greater(e.t, subP.Accepted(), int64(1), "the consumer reconnects after the resets")
	e.finish(sub)
}

// testBlackholeLongerThanAckTimeout blackholes a consumer that holds
// deliveries for three ack timeouts: their leases run out, another member
// of the group gets them, and when the link heals the first consumer goes
// on by itself.
func testBlackholeLongerThanAckTimeout(e *env) {
	pubP, p1, p2 := e.proxy(), e.proxy(), e.proxy()
	pub, c1, c2 := e.bus(pubP), e.bus(p1), e.bus(p2)
	e.publishAll(pub, "m", 200, 50, callTimeout, nil)

	const inFlight = 8
	release := make(chan struct{})
	var held atomic.Int32
	sub1 := e.consumeWith(c1, "c1", func(ctx context.Context, _ *bus.Delivery) error {
		if held.Add(1) <= inFlight {
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}, bus.WithMaxInFlight(inFlight))
	require.Eventually(e.t, func() bool { return held.Load() >= inFlight }, recoverWithin, poll,
		"c1 holds %d deliveries", inFlight)

	healed := p1.Partition(3 * ackTimeout)
	close(release) // their acks now wait behind the blackhole
	sub2 := e.consume(c2, "c2")
	select {
	case <-healed:
	case <-time.After(recoverWithin):
		e.t.Fatal("the blackhole never lifted")
	}
	e.waitNoLoss("while c1 was blackholed")
	redelivered := e.ledger.Summary().Redelivered
	assert.Positive(e.t, redelivered, "the leases c1 held ran out during the blackhole and the group got them again")

	// c1 goes on by itself: with c2 gone, it gets everything published now.
	err := e.calls.timed("Subscription.Close", closeTimeout, sub2.Close)
	require.NoError(e.t, err, "close c2")
	before := e.ledger.DeliveredTo("c1")
	e.recovered(pub)
	assert.GreaterOrEqual(e.t, e.ledger.DeliveredTo("c1")-before, 100, "c1 receives again after the link healed")
	e.finish(sub1)
}

// testBlackholeBoundsEveryCall checks that calls over a blackholed link
// end with their ctx: Publish (200 ms ctx: an error within 300 ms),
// Subscribe (500 ms), and Subscription.Close and Bus.Close with acks
// pending (1 s ctx: back within 1.1 s). Afterwards a new member of the
// group gets every message.
func testBlackholeBoundsEveryCall(e *env) {
	pubP, subP := e.proxy(), e.proxy()
	e.boundsEveryCall(e.bus(pubP), e.bus(subP), e.bus(subP), func() {
		pubP.Blackhole(true)
		subP.Blackhole(true)
	}, func() {
		pubP.Blackhole(false)
		subP.Blackhole(false)
	}, func() *bus.Bus { return e.bus(e.proxy()) })
}

// boundsEveryCall publishes 50 messages, lets consumer hold 8 of them,
// applies fault, and checks that calls end with their ctx: the handlers
// ack (the acks are pending behind the fault), then Publish on pub
// (200 ms ctx: an error within 300 ms), Subscribe on late (500 ms), and
// Subscription.Close and Bus.Close of consumer and pub (1 s ctx: back
// within 1.1 s). After heal, a member on next() gets every message.
func (e *env) boundsEveryCall(pub, consumer, late *bus.Bus, fault, heal func(), next func() *bus.Bus) {
	e.publishAll(pub, "m", 50, 50, callTimeout, nil)

	const inFlight = 8
	release := make(chan struct{})
	var running atomic.Int32
	sub := e.consumeWith(consumer, "c1", func(ctx context.Context, _ *bus.Delivery) error {
		running.Add(1)
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}, bus.WithMaxInFlight(inFlight))
	require.Eventually(e.t, func() bool { return running.Load() >= inFlight }, recoverWithin, poll,
		"c1 runs %d handlers", inFlight)

	fault()
	healed := false
	defer func() {
		if !healed {
			heal()
		}
	}()
	close(release) // the handlers ack: the acks are pending behind the fault

	err := e.calls.timed("Publish(200ms ctx, fault)", 200*time.Millisecond, func(ctx context.Context) error {
		return pub.Publish(ctx, e.topic, messages([]string{"during-fault"})...)
	})
	e.ledger.Publish([]string{"during-fault"}, err)
	assert.Error(e.t, err, "Publish during the fault fails when its ctx ends")

	_ = e.calls.timed("Subscribe(500ms ctx, fault)", 500*time.Millisecond, func(ctx context.Context) error {
		// A nil error is fine too: the subscription then ends with ctx.
		_, err := late.Subscribe(ctx, e.topic, func(context.Context, *bus.Delivery) error { return nil },
			bus.WithGroup("late"), bus.WithAckTimeout(ackTimeout))
		return err
	})
	_ = e.calls.timed("Subscription.Close(1s ctx, fault)", time.Second, sub.Close)
	_ = e.calls.timed("Bus.Close(1s ctx, fault, consumer)", time.Second, consumer.Close)
	_ = e.calls.timed("Bus.Close(1s ctx, fault, publisher)", time.Second, pub.Close)

	heal()
	healed = true
	sub2 := e.consume(next(), "c2")
	e.waitNoLoss("a new member after the fault")
	e.finish(sub2)
}

// testLatency adds 50 ms in each direction on both sides.
func testLatency(e *env) {
	const latency = 50 * time.Millisecond
	pubP, subP := e.proxy(), e.proxy()
	pub, consumer := e.bus(pubP), e.bus(subP)
	sub := e.consume(consumer, "consumer")
	pubP.SetLatency(latency)
	subP.SetLatency(latency)

	start := time.Now()
	require.NoError(e.t, e.publish(pub, []string{"first"}, callTimeout), "publish with added latency")
	assert.GreaterOrEqual(e.t, time.Since(start), 2*latency, "the latency is on the publisher's path")
	e.publishAll(pub, "m", 300, 10, callTimeout, nil)
	e.waitNoLoss("with 50 ms latency")
	e.finish(sub)
}

// testPartitionDuringBatch partitions both sides for 1.5 s while 2,000
// messages are published in batches of 100 with a 1 s ctx each.
func testPartitionDuringBatch(e *env) {
	const partition = 1500 * time.Millisecond
	pubP, subP := e.proxy(), e.proxy()
	pub, consumer := e.bus(pubP), e.bus(subP)
	sub := e.consume(consumer, "consumer", bus.WithMaxInFlight(64))

	var healedPub, healedSub <-chan struct{}
	e.publishAll(pub, "m", 2000, 100, time.Second, func(done int) {
		if done == 500 {
			healedPub, healedSub = pubP.Partition(partition), subP.Partition(partition)
		}
	})
	for _, healed := range []<-chan struct{}{healedPub, healedSub} {
		require.NotNil(e.t, healed, "the partition started")
		select {
		case <-healed:
		case <-time.After(recoverWithin):
			e.t.Fatal("the partition never healed")
		}
	}
	e.waitNoLoss("after the partition")
	s := e.finish(sub)
	assert.Positive(e.t, s.PublishErrors, "a Publish with a 1 s ctx cannot succeed across a 1.5 s partition")
}

// testCloseMidRunFlushesFinished closes a subscription while 16 handlers
// work through 200 messages: Close returns once they finish, their acks
// are flushed, and the next member of the group gets the rest without
// seeing any message the first one finished.
func testCloseMidRunFlushesFinished(e *env) {
	pubP, subP := e.proxy(), e.proxy()
	pub, consumer := e.bus(pubP), e.bus(subP)
	const n = 200
	e.publishAll(pub, "m", n, 50, callTimeout, nil)

	var mu sync.Mutex
	finished := map[string]bool{}
	sub1 := e.consumeWith(consumer, "first", func(ctx context.Context, d *bus.Delivery) error {
		select { // simulated work of 5 to 23 ms
		case <-time.After(time.Duration(5+len(d.ID)%7*3) * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
		mu.Lock()
		finished[d.ID] = true
		mu.Unlock()
		return nil
	}, bus.WithMaxInFlight(16))
	require.Eventually(e.t, func() bool { mu.Lock(); defer mu.Unlock(); return len(finished) >= n/4 }, recoverWithin, poll,
		"the first member finishes a quarter of the messages")
	err := e.calls.timed("Subscription.Close", 10*time.Second, sub1.Close)
	require.NoError(e.t, err, "close with handlers in flight that finish in time")
	mu.Lock()
	done := len(finished)
	mu.Unlock()
	require.Less(e.t, done, n, "the close happened mid-run")

	var dupOfFinished atomic.Int64
	sub2 := e.consumeWith(consumer, "second", func(_ context.Context, d *bus.Delivery) error {
		mu.Lock()
		if finished[d.ID] {
			dupOfFinished.Add(1)
		}
		mu.Unlock()
		return nil
	})
	e.waitNoLoss("the next member gets the rest")
	assert.Never(e.t, func() bool { return dupOfFinished.Load() > 0 }, 4*ackTimeout, 10*time.Millisecond,
		"messages finished before Close returned are never delivered again")
	e.t.Logf("finished by the first member: %d", done)
	e.finish(sub2)
}

// testServerRestartMidRun stops the server while a publisher and a
// consumer run and starts it again on the same address and data:
// publishers see errors meanwhile, then publishing and consuming resume
// by themselves.
func testServerRestartMidRun(e *env) {
	if e.h.StopServer == nil || e.h.StartServer == nil {
		e.t.Skip("the harness cannot stop and start its server")
	}
	pubP, subP := e.proxy(), e.proxy()
	pub, consumer := e.bus(pubP), e.bus(subP)
	sub := e.consume(consumer, "consumer")

	var confirmed atomic.Int64
	stop := make(chan struct{})
	pubDone := make(chan struct{})
	go func() {
		defer close(pubDone)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			batch := ids("m", 10*i, 10*i+10)
			if e.publish(pub, batch, time.Second) == nil {
				confirmed.Add(int64(len(batch)))
				continue
			}
			select { // pacing while the server is down, not synchronisation
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	stopPublisher := sync.OnceFunc(func() { close(stop); <-pubDone })
	defer stopPublisher()

	require.Eventually(e.t, func() bool { return confirmed.Load() >= 200 }, recoverWithin, poll, "publishing runs")
	e.h.StopServer()
	require.Eventually(e.t, func() bool { return e.ledger.Summary().PublishErrors >= 3 }, recoverWithin, poll,
		"publishers see errors while the server is down")
	e.h.StartServer()
	resumed := confirmed.Load() + 200
	require.Eventually(e.t, func() bool { return confirmed.Load() >= resumed }, recoverWithin, poll,
		"publishing resumes after the restart")
	stopPublisher()
	e.waitNoLoss("after the server restart")
	e.finish(sub)
}
