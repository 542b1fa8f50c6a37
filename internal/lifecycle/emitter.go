package lifecycle

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/observer"
)

// Defaults of Config.
const (
	DefaultBuffer = 16384
	DefaultBatch  = 4096
	// publishTimeout bounds one batch's publish.
	publishTimeout = 10 * time.Second
	// linger is how long the goroutine waits, once an event is buffered,
	// for more to fill a batch, so that the events of a busy bus go out in
	// full messages and few publishes.
	linger = 2 * time.Millisecond
)

// Config is what an Emitter runs with.
type Config struct {
	// Topic is the events topic, for reports.
	Topic string
	// Publish stores one batch on the events topic. It may keep neither
	// the slice nor the messages nor their buffers after it returns (the
	// backend.Backend contract).
	Publish func(ctx context.Context, msgs []*backend.Message) error
	// Observe receives the one report of drops and each failed batch.
	Observe func(observer.Event)
	// Buffer is how many events wait at most (0: DefaultBuffer); Batch
	// how many one publish carries at most (0: DefaultBatch), packed
	// into messages of at most Pack events (0: MaxPackEvents) and about
	// MaxPackBytes.
	Buffer, Batch, Pack int
}

// Emitter buffers events and publishes them in batches on its own
// goroutine. Emit is safe for concurrent use and never blocks.
//
// The buffer is a few shards (by the message an event is about), each a
// slice that Emit appends to under the shard's mutex; the goroutine swaps
// each for an empty one, so an event is copied once into the buffer and
// never again before it is encoded, and concurrent Emits seldom wait for
// one another.
type Emitter struct {
	cfg     Config
	shards  []shard
	wake    chan struct{} // a shard got its first event
	full    chan struct{} // a shard holds its part of a batch
	fullAt  int
	dropped atomic.Int64
	stop    chan struct{}
	done    chan struct{}
	ctx     context.Context // cancelled when Close gives up waiting
	cancel  context.CancelFunc
	once    sync.Once

	// Owned by the run goroutine.
	taken [][]Event // per shard, what take took
	pk    packer
}

// shard is a part of the buffer, padded to keep the shards' locks on
// cache lines of their own.
type shard struct {
	mu      sync.Mutex
	pending []Event // never grows past its capacity
	closing bool    // set by Close: Emit drops from then on
	_       [64]byte
}

// shardsFor is how many shards a buffer of n events has: several when
// each still holds a few messages' worth.
func shardsFor(n int) int {
	const most = 8
	return max(1, min(most, n/(4*MaxPackEvents)))
}

// New starts an Emitter; Close stops it.
func New(cfg Config) *Emitter {
	if cfg.Buffer <= 0 {
		cfg.Buffer = DefaultBuffer
	}
	if cfg.Batch <= 0 {
		cfg.Batch = DefaultBatch
	}
	if cfg.Pack <= 0 || cfg.Pack > MaxPackEvents {
		cfg.Pack = MaxPackEvents
	}
	k := shardsFor(cfg.Buffer)
	e := &Emitter{cfg: cfg, shards: make([]shard, k), taken: make([][]Event, k), fullAt: max(1, cfg.Batch/k),
		wake: make(chan struct{}, 1), full: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		pk: packer{maxEvents: cfg.Pack, maxBytes: MaxPackBytes}}
	for i := range e.shards {
		size := cfg.Buffer / k
		if i < cfg.Buffer%k {
			size++
		}
		e.shards[i].pending = make([]Event, 0, size)
		e.taken[i] = make([]Event, 0, size)
	}
	e.ctx, e.cancel = context.WithCancel(context.Background())
	go e.run()
	return e
}

// Emit buffers ev, or counts it as dropped when the buffer is full or the
// emitter is closing. It never blocks.
func (e *Emitter) Emit(ev Event) { e.emit(&ev) }

// Sink is an Emitter as one subscription sees it: it names the topic and
// the member of each event. Its Emit takes a pointer, which a caller's
// event on its stack may pass without moving to the heap. It is safe for
// concurrent use.
type Sink struct {
	em            *Emitter
	topic, member string
}

// Sink returns the Sink of the subscription member on topic.
func (e *Emitter) Sink(topic, member string) *Sink {
	return &Sink{em: e, topic: topic, member: member}
}

// Emit sets ev's Topic and Member and buffers a copy of it, as
// Emitter.Emit does.
func (s *Sink) Emit(ev *Event) {
	ev.Topic, ev.Member = s.topic, s.member
	s.em.emit(ev)
}

func (e *Emitter) emit(ev *Event) {
	sh := &e.shards[0]
	if len(e.shards) > 1 {
		h := len(ev.MessageID)
		if h > 0 {
			h += int(ev.MessageID[h-1])
		}
		sh = &e.shards[h%len(e.shards)]
	}
	sh.mu.Lock()
	n := len(sh.pending)
	if n == cap(sh.pending) || sh.closing {
		closing := sh.closing
		sh.mu.Unlock()
		if e.dropped.Add(1) == 1 && !closing {
			e.reportDrop()
		}
		return
	}
	sh.pending = append(sh.pending, *ev)
	sh.mu.Unlock()
	switch n + 1 {
	case 1:
		signal(e.wake)
	case e.fullAt:
		signal(e.full)
	}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// Dropped is how many events were dropped so far.
func (e *Emitter) Dropped() int64 { return e.dropped.Load() }

// Close publishes what is buffered and stops the goroutine. It waits until
// ctx ends at most; then the publish in progress is cancelled, and Close
// waits for the goroutine no longer than hard.
func (e *Emitter) Close(ctx, hard context.Context) error {
	e.once.Do(func() {
		for i := range e.shards {
			sh := &e.shards[i]
			sh.mu.Lock()
			sh.closing = true
			sh.mu.Unlock()
		}
		close(e.stop)
	})
	select {
	case <-e.done:
		return nil
	case <-ctx.Done():
	}
	e.cancel()
	select {
	case <-e.done:
	case <-hard.Done():
	}
	return fmt.Errorf("lifecycle events to %q: not all published before the close ctx ended: %w", e.cfg.Topic, ctx.Err())
}

func (e *Emitter) run() {
	defer close(e.done)
	defer e.cancel()
	t := time.NewTimer(linger)
	defer t.Stop()
	for {
		select {
		case <-e.wake:
			t.Reset(linger)
			select {
			case <-t.C:
			case <-e.full:
			case <-e.stop:
			}
			e.take()
			e.publish()
		case <-e.stop:
			// Emit drops from now on: what is buffered is all there is.
			e.take()
			e.publish()
			return
		}
	}
}

// take swaps each shard for the goroutine's empty one.
func (e *Emitter) take() {
	for i := range e.shards {
		sh := &e.shards[i]
		sh.mu.Lock()
		e.taken[i], sh.pending = sh.pending, e.taken[i][:0]
		sh.mu.Unlock()
	}
}

// publish publishes what take took, Batch events at a time, and empties
// it.
func (e *Emitter) publish() {
	now := time.Now()
	e.pk.reset(now)
	n := 0
	for i, evs := range e.taken {
		for j := range evs {
			if e.ctx.Err() != nil {
				break
			}
			e.pk.add(&evs[j])
			if n++; n == e.cfg.Batch {
				e.flush(n)
				now = time.Now()
				e.pk.reset(now)
				n = 0
			}
		}
		clear(evs) // drop the strings the events referenced
		e.taken[i] = evs[:0]
	}
	if n > 0 {
		e.flush(n)
	}
}

// flush publishes the n events packed since the packer's reset.
func (e *Emitter) flush(n int) {
	msgs := e.pk.finish()
	ctx, cancel := context.WithTimeout(e.ctx, publishTimeout)
	err := e.cfg.Publish(ctx, msgs)
	cancel()
	if err != nil && e.cfg.Observe != nil {
		e.cfg.Observe(observer.Event{Scope: observer.ScopePublish, Topic: e.cfg.Topic,
			Err: fmt.Errorf("bus: lifecycle events to %q: %d of %d lost: %w", e.cfg.Topic, e.pk.lost(err), n, err)})
	}
}

// reportDrop tells the observer of the first drop; it runs once, on the
// goroutine that dropped (the emitter's own may be stuck in a publish).
func (e *Emitter) reportDrop() {
	if e.cfg.Observe == nil {
		return
	}
	e.cfg.Observe(observer.Event{Scope: observer.ScopePublish, Topic: e.cfg.Topic,
		Err: fmt.Errorf("bus: lifecycle events to %q: an event was dropped, the buffer of %d was full (the events topic is slower than the bus); further drops are counted, not reported", e.cfg.Topic, e.cfg.Buffer)})
}
