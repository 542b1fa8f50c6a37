package bus

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/shutdown"
	"github.com/eventbus-go/bus/observer"
)

// ackFlushTimeout bounds one flush of acks to the backend. Flushes run on
// a detached ctx so they survive shutdown.
const ackFlushTimeout = 10 * time.Second

// acker batches the acks of one consumer into few backend calls: a flush
// happens when size ids wait in the buffers together, or interval after
// the first one arrived, and once more on close. Acks wait in buffers the
// acker owns: one per dispatcher worker (ackBuf), for the acks a worker
// makes when a handler returns, and the acker's own, for every other ack.
// The dispatcher registers its workers' buffers here; the acker never
// calls back into the dispatcher.
//
// The count is of all buffers, not of the fullest: an ack that waits
// holds its message at the broker (a NATS consumer's MaxAckPending, a
// Redis pending entry), so what waits is bounded by size however many
// workers buffer acks, and a flush never waits for one worker's buffer to
// fill while the others hold more.
type acker struct {
	bsub     backend.Subscription
	obs      observer.Observer
	failed   observer.Event // what a failed flush reports, its Err aside
	size     int
	interval time.Duration

	// mu guards buf and bufs. closed is set under it, so that add, which
	// checks it under mu, never buffers after the final flush; an ackBuf
	// checks it under its own lock for the same reason.
	mu     sync.Mutex
	buf    []backend.AckID
	bufs   []*ackBuf // the workers' buffers
	closed atomic.Bool
	// waiting counts the ids buffered and not yet taken by a flush, over
	// all buffers: an add counts its id after buffering it, a flush
	// subtracts what it took, so it may lag what the buffers hold, never
	// run ahead of it.
	waiting atomic.Int64
	// Only run touches these: the ids of the flush in progress when they
	// came from more than one buffer, the buffers a flush took whole
	// (each swapped for an empty one, so most acks are never copied),
	// the emptied buffers that replace them, and the list of workers'
	// buffers a flush visits.
	flushing []backend.AckID
	taken    [][]backend.AckID
	spares   [][]backend.AckID
	visit    []*ackBuf

	first chan struct{} // the first id waits
	full  chan struct{} // size ids wait
	stop  chan struct{}
	done  chan struct{}

	// flushCtx bounds the final flush by the Close ctx; set before stop
	// is closed.
	flushCtx context.Context
}

// ackBuf is the ack buffer of one dispatcher worker. Its lock is taken by
// its worker, once per ack, and by the acker's flush: no lock that every
// worker shares is taken per message, which on a busy subscription would
// cost more than its handlers.
type ackBuf struct {
	a   *acker
	mu  sync.Mutex
	ids []backend.AckID
}

// newAcker returns the acker of bsub, which flushes in chunks of size ids,
// interval after the first; failed flushes go to obs as ScopeAck events of
// topic and group.
func newAcker(bsub backend.Subscription, obs observer.Observer, topic, group string, size int, interval time.Duration) *acker {
	return &acker{
		bsub: bsub, obs: obs, size: size, interval: interval,
		failed: observer.Event{Scope: observer.ScopeAck, Topic: topic, Group: group},
		buf:    make([]backend.AckID, 0, size),
		first:  make(chan struct{}, 1),
		full:   make(chan struct{}, 1),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
}

// newBuf registers and returns the buffer of a new worker.
func (a *acker) newBuf() *ackBuf {
	b := &ackBuf{a: a}
	a.mu.Lock()
	a.bufs = append(a.bufs, b)
	a.mu.Unlock()
	return b
}

// dropBuf unregisters the buffer of a worker that ends; what it holds
// moves to the acker's own buffer.
func (a *acker) dropBuf(b *ackBuf) {
	b.mu.Lock()
	ids := b.ids
	b.ids = nil
	b.mu.Unlock()
	a.mu.Lock()
	for i, x := range a.bufs {
		if x == b {
			a.bufs[i] = a.bufs[len(a.bufs)-1]
			a.bufs[len(a.bufs)-1] = nil
			a.bufs = a.bufs[:len(a.bufs)-1]
			break
		}
	}
	a.buf = append(a.buf, ids...) // counted in waiting already
	a.mu.Unlock()
}

// add buffers the ack of a delivery the worker ran; it returns ErrClosed
// once the acker has closed.
func (b *ackBuf) add(id backend.AckID) error {
	b.mu.Lock()
	if b.a.closed.Load() {
		b.mu.Unlock()
		return ErrClosed
	}
	b.ids = append(b.ids, id)
	b.mu.Unlock()
	b.a.buffered()
	return nil
}

// swap returns the buffered ids and puts empty, an empty buffer, in their
// place; it returns nil, keeping empty out, when no id is buffered.
func (b *ackBuf) swap(empty []backend.AckID) []backend.AckID {
	b.mu.Lock()
	ids := b.ids
	if len(ids) == 0 {
		b.mu.Unlock()
		return nil
	}
	b.ids = empty
	b.mu.Unlock()
	return ids
}

// buffered counts an id just buffered, and wakes run for the first id
// and once size of them wait.
func (a *acker) buffered() {
	n := a.waiting.Add(1)
	if n == 1 {
		signal(a.first)
	}
	if n >= int64(a.size) {
		signal(a.full)
	}
}

// signal wakes a goroutine waiting on ch, without blocking.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// add buffers an ack made outside a worker; it returns ErrClosed once the
// acker has closed.
func (a *acker) add(id backend.AckID) error {
	a.mu.Lock()
	if a.closed.Load() {
		a.mu.Unlock()
		return ErrClosed
	}
	a.buf = append(a.buf, id)
	a.mu.Unlock()
	a.buffered()
	return nil
}

// run flushes until close. It waits for a first id unless ids are
// counted already (added while the last flush ran), then up to interval
// unless size of them wait.
func (a *acker) run() {
	defer close(a.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		if a.waiting.Load() <= 0 {
			// The add that counts the first id signals first, also
			// when the count lagged a flush that took ids before
			// their adds counted them.
			select {
			case <-a.stop:
				a.flush(a.flushCtx)
				return
			case <-a.first:
			case <-a.full:
			}
		}
		if a.waiting.Load() < int64(a.size) {
			timer.Reset(a.interval)
			select {
			case <-timer.C:
			case <-a.full:
				timer.Stop()
			case <-a.stop:
				timer.Stop()
				a.flush(a.flushCtx)
				return
			}
		}
		a.flush(context.Background())
	}
}

// flush sends everything buffered, in chunks of at most size, the acks
// of every buffer together: a flush is one backend call per chunk,
// whichever buffer its acks waited in. Each chunk gets ackFlushTimeout,
// and no more than parent allows.
func (a *acker) flush(parent context.Context) {
	for {
		a.mu.Lock()
		if len(a.buf) > 0 {
			a.taken = append(a.taken, a.buf)
			a.buf = a.spare()
		}
		a.visit = append(a.visit[:0], a.bufs...)
		a.mu.Unlock()
		for _, b := range a.visit {
			empty := a.spare()
			if ids := b.swap(empty); ids != nil {
				a.taken = append(a.taken, ids)
			} else if empty != nil {
				a.spares = append(a.spares, empty)
			}
		}
		clear(a.visit)
		var ids []backend.AckID
		switch len(a.taken) {
		case 0:
			return
		case 1:
			ids = a.taken[0]
		default:
			ids = a.flushing[:0]
			for _, t := range a.taken {
				ids = append(ids, t...)
			}
			a.flushing = ids
		}
		// Acks that arrive while this flush waits for the backend count
		// towards the next one, which starts at once when size of them
		// wait by then.
		a.waiting.Add(-int64(len(ids)))
		for start := 0; start < len(ids); start += a.size {
			chunk := ids[start:min(start+a.size, len(ids))]
			ctx := newFlushCtx(parent)
			err := a.bsub.Ack(ctx, chunk)
			ctx.end()
			if err != nil {
				e := a.failed
				e.Err = err
				a.obs.Observe(context.Background(), e)
			}
		}
		if len(a.taken) > 1 {
			clear(ids)
		}
		for _, t := range a.taken {
			clear(t)
			a.spares = append(a.spares, t[:0])
		}
		clear(a.taken)
		a.taken = a.taken[:0]
	}
}

// spare takes an emptied buffer out of spares, nil when there is none.
func (a *acker) spare() []backend.AckID {
	n := len(a.spares)
	if n == 0 {
		return nil
	}
	b := a.spares[n-1]
	a.spares[n-1] = nil
	a.spares = a.spares[:n-1]
	return b
}

// close flushes what is buffered and refuses later acks (they return an
// error wrapping ErrClosed). The flush is bounded by hard, the Close's
// ctx plus its grace; acks it cannot send are redelivered after their
// lease.
func (a *acker) close(hard context.Context) error {
	a.mu.Lock()
	a.closed.Store(true)
	a.mu.Unlock()
	a.flushCtx = hard
	close(a.stop)
	if !shutdown.WaitOrDone(hard, a.done) {
		return errors.New("ack flush did not finish before the close ctx ended")
	}
	return nil
}
