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
// The buffer is a slice that Emit appends to under a mutex; the goroutine
// swaps it for its own empty one, so an event is copied once into the
// buffer and never again before it is encoded.
type Emitter struct {
	cfg     Config
	mu      sync.Mutex
	pending []Event // the buffer; never grows past cfg.Buffer
	closing bool    // set under mu by Close: Emit drops from then on
	wake    chan struct{} // the buffer got its first event
	full    chan struct{} // the buffer holds a batch
	dropped atomic.Int64
	stop    chan struct{}
	done    chan struct{}
	ctx     context.Context // cancelled when Close gives up waiting
	cancel  context.CancelFunc
	once    sync.Once

	// Owned by the run goroutine.
	batch []Event
	pk    packer
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
	e := &Emitter{cfg: cfg, pending: make([]Event, 0, cfg.Buffer), batch: make([]Event, 0, cfg.Buffer),
		wake: make(chan struct{}, 1), full: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		pk: packer{maxEvents: cfg.Pack, maxBytes: MaxPackBytes}}
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
	e.mu.Lock()
	n := len(e.pending)
	if n == cap(e.pending) || e.closing {
		closing := e.closing
		e.mu.Unlock()
		if e.dropped.Add(1) == 1 && !closing {
			e.reportDrop()
		}
		return
	}
	e.pending = append(e.pending, *ev)
	e.mu.Unlock()
	switch n + 1 {
	case 1:
		signal(e.wake)
	case e.cfg.Batch:
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
		e.mu.Lock()
		e.closing = true
		e.mu.Unlock()
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

// take swaps the buffer for the goroutine's empty batch.
func (e *Emitter) take() {
	e.mu.Lock()
	e.batch, e.pending = e.pending, e.batch[:0]
	e.mu.Unlock()
}

// publish publishes the batch, Batch events at a time, and empties it.
func (e *Emitter) publish() {
	for b := e.batch; len(b) > 0 && e.ctx.Err() == nil; {
		n := min(len(b), e.cfg.Batch)
		e.flush(b[:n])
		b = b[n:]
	}
	clear(e.batch) // drop the strings the events referenced
	e.batch = e.batch[:0]
}

// flush packs evs into messages and publishes them.
func (e *Emitter) flush(evs []Event) {
	msgs := e.pk.pack(evs, time.Now())
	ctx, cancel := context.WithTimeout(e.ctx, publishTimeout)
	err := e.cfg.Publish(ctx, msgs)
	cancel()
	if err != nil && e.cfg.Observe != nil {
		e.cfg.Observe(observer.Event{Scope: observer.ScopePublish, Topic: e.cfg.Topic,
			Err: fmt.Errorf("bus: lifecycle events to %q: %d of %d lost: %w", e.cfg.Topic, e.pk.lost(err), len(evs), err)})
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
