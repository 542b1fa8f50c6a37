package lifecycle

import (
	"context"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/observer"
)

// Defaults of Config.
const (
	DefaultBuffer = 65536
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
// The buffer is a few shards (by the message an event is about) of the
// emitter's own and of each Sink. Emit encodes the event into
// its shard's bytes under the shard's mutex; the goroutine swaps each
// shard's bytes for empty ones and publishes them cut into messages,
// without copying them again. The buffer holds no pointers for the
// garbage collector to follow and keeps no string of the events alive.
type Emitter struct {
	cfg     Config
	shards  []*shard
	free    atomic.Int64  // room left in the buffer, in events
	wake    chan struct{} // a shard got its first event
	full    chan struct{} // the buffer holds a batch
	seed    maphash.Seed  // spreads the events over the shards
	ref     atomic.Pointer[clockRef]
	dropped atomic.Int64
	stop    chan struct{}
	done    chan struct{}
	ctx     context.Context // cancelled when Close gives up waiting
	cancel  context.CancelFunc
	once    sync.Once

	regMu  sync.Mutex
	sinks  []*Sink // until the take after their Release
	closed bool

	// Owned by the run goroutine.
	cur []*shard // the shards of the last take
	pk  packer
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
	e := &Emitter{cfg: cfg, shards: make([]*shard, shardsFor(cfg.Buffer)),
		wake: make(chan struct{}, 1), full: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		pk: packer{maxEvents: cfg.Pack, maxBytes: MaxPackBytes}, seed: maphash.MakeSeed()}
	e.free.Store(int64(cfg.Buffer))
	e.ref.Store(newRef(time.Now()))
	for i := range e.shards {
		e.shards[i] = &shard{}
	}
	e.ctx, e.cancel = context.WithCancel(context.Background())
	go e.run()
	return e
}

// Dropped is how many events were dropped so far.
func (e *Emitter) Dropped() int64 { return e.dropped.Load() }

// Close publishes what is buffered and stops the goroutine. It waits until
// ctx ends at most; then the publish in progress is cancelled, and Close
// waits for the goroutine no longer than hard.
func (e *Emitter) Close(ctx, hard context.Context) error {
	e.once.Do(func() {
		e.regMu.Lock()
		e.closed = true
		for _, s := range e.sinks {
			s.flushStages() // what the workers staged goes out too
			for _, sh := range s.shards {
				sh.close()
			}
		}
		e.regMu.Unlock()
		for _, sh := range e.shards {
			sh.close()
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

// take swaps each shard's lines for the goroutine's empty ones, and
// forgets the Sinks released before it: their last lines are taken.
func (e *Emitter) take() {
	e.ref.Store(newRef(time.Now()))
	e.cur = append(e.cur[:0], e.shards...)
	e.regMu.Lock()
	for _, s := range e.sinks {
		s.flushStages()
	}
	kept := e.sinks[:0]
	for _, s := range e.sinks {
		e.cur = append(e.cur, s.shards...)
		if !s.released.Load() {
			kept = append(kept, s)
		}
	}
	clear(e.sinks[len(kept):])
	e.sinks = kept
	e.regMu.Unlock()
	for _, sh := range e.cur {
		sh.take(e)
	}
}

// publish publishes what take took, about Batch events at a time.
func (e *Emitter) publish() {
	e.pk.reset(time.Now())
	for _, sh := range e.cur {
		l := &sh.taken
		for from := 0; from < len(l.ends) && e.ctx.Err() == nil; {
			from = e.pk.add(l, from, e.cfg.Batch-e.pk.events, sh.k)
			if e.pk.events >= e.cfg.Batch {
				e.flush()
				e.pk.reset(time.Now())
			}
		}
	}
	e.flush()
}

// flush publishes the events packed since the packer's reset.
func (e *Emitter) flush() {
	n := e.pk.events
	if n == 0 {
		return
	}
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
