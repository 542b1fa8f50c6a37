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
type Emitter struct {
	cfg     Config
	ch      chan Event
	dropped atomic.Int64
	stopped atomic.Bool
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
	e := &Emitter{cfg: cfg, ch: make(chan Event, cfg.Buffer), stop: make(chan struct{}), done: make(chan struct{}),
		pk: packer{maxEvents: cfg.Pack, maxBytes: MaxPackBytes}}
	e.ctx, e.cancel = context.WithCancel(context.Background())
	go e.run()
	return e
}

// Emit buffers ev, or counts it as dropped when the buffer is full or the
// emitter is closing. It never blocks.
func (e *Emitter) Emit(ev Event) {
	if e.stopped.Load() {
		e.dropped.Add(1)
		return
	}
	select {
	case e.ch <- ev:
	default:
		if e.dropped.Add(1) == 1 {
			e.reportDrop()
		}
	}
}

// Dropped is how many events were dropped so far.
func (e *Emitter) Dropped() int64 { return e.dropped.Load() }

// Close publishes what is buffered and stops the goroutine. It waits until
// ctx ends at most; then the publish in progress is cancelled, and Close
// waits for the goroutine no longer than hard.
func (e *Emitter) Close(ctx, hard context.Context) error {
	e.once.Do(func() {
		e.stopped.Store(true)
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
	for {
		select {
		case ev := <-e.ch:
			e.batch = append(e.batch[:0], ev)
			e.fill()
			e.flush()
		case <-e.stop:
			for len(e.ch) > 0 && e.ctx.Err() == nil {
				e.batch = e.batch[:0]
				e.fill()
				e.flush()
			}
			return
		}
	}
}

// fill adds to the batch what is buffered, up to Batch events.
func (e *Emitter) fill() {
	for len(e.batch) < e.cfg.Batch {
		select {
		case ev := <-e.ch:
			e.batch = append(e.batch, ev)
		default:
			return
		}
	}
}

// flush packs the batch into messages and publishes them.
func (e *Emitter) flush() {
	n := len(e.batch)
	if n == 0 {
		return
	}
	msgs := e.pk.pack(e.batch, time.Now())
	ctx, cancel := context.WithTimeout(e.ctx, publishTimeout)
	err := e.cfg.Publish(ctx, msgs)
	cancel()
	clear(e.batch) // drop the strings the events referenced
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
