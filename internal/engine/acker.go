package engine

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/observer"
)

// ackFlushTimeout bounds one flush of acks to the backend. Flushes run on
// a detached ctx so they survive shutdown.
const ackFlushTimeout = 10 * time.Second

// acker batches acks of one subscription into few backend calls: a flush
// happens when size ids are waiting in one buffer, or interval after the
// first one arrived, and once more on close. Acks wait in two buffers:
// the dispatcher's, for the acks its workers make when a handler returns
// (see Sub.ackAfterHandler), and the acker's own, for every
// other ack.
type acker[P any] struct {
	sub      *Sub[P]
	size     int
	interval time.Duration

	mu  sync.Mutex
	buf []backend.AckID
	// closed is set by close, under mu so that add, which checks it
	// under mu, never buffers after the final flush; the dispatcher
	// checks it under its own lock for the same reason (ackLocked).
	closed atomic.Bool
	// The buffers of the flush in progress, swapped with the ones acks
	// go to; only run touches them.
	fromWorkers, fromOthers []backend.AckID

	first chan struct{} // a buffer got its first id
	full  chan struct{} // a buffer holds size ids
	stop  chan struct{}
	done  chan struct{}

	// flushCtx bounds the final flush by the Close ctx; set before stop
	// is closed.
	flushCtx context.Context
}

func newAcker[P any](s *Sub[P], size int, interval time.Duration) *acker[P] {
	return &acker[P]{
		sub: s, size: size, interval: interval,
		buf:   make([]backend.AckID, 0, size),
		first: make(chan struct{}, 1),
		full:  make(chan struct{}, 1),
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
	}
}

// isClosed reports whether close was called.
func (a *acker[P]) isClosed() bool { return a.closed.Load() }

// buffered wakes run for a buffer that now holds n ids.
func (a *acker[P]) buffered(n int) {
	if n == 1 {
		signal(a.first)
	}
	if n >= a.size {
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

// dropped reports the ack of d, made after the acker closed; the message
// is redelivered after its lease.
func (a *acker[P]) dropped(d *Delivery[P]) {
	a.sub.report(d, observer.ScopeAck, d.ackErr(ErrClosed))
}

func (a *acker[P]) add(id backend.AckID) error {
	a.mu.Lock()
	if a.closed.Load() {
		a.mu.Unlock()
		return ErrClosed
	}
	a.buf = append(a.buf, id)
	n := len(a.buf)
	a.mu.Unlock()
	a.buffered(n)
	return nil
}

func (a *acker[P]) run() {
	defer close(a.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-a.stop:
			a.flush(a.flushCtx)
			return
		case <-a.first:
		case <-a.full:
		}
		if a.pending() < a.size {
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

// pending counts the ids in the fuller buffer.
func (a *acker[P]) pending() int {
	a.mu.Lock()
	n := len(a.buf)
	a.mu.Unlock()
	return max(n, a.sub.disp.pendingAcks())
}

// flush sends everything buffered, in chunks of at most size, the acks
// of both buffers together: a flush is one backend call per chunk,
// whichever buffer its acks waited in. Each chunk gets ackFlushTimeout,
// and no more than parent allows.
func (a *acker[P]) flush(parent context.Context) {
	for {
		a.fromWorkers = a.sub.disp.swapAcks(a.fromWorkers)
		a.mu.Lock()
		a.fromOthers, a.buf = a.buf, a.fromOthers[:0]
		a.mu.Unlock()
		ids := append(a.fromWorkers, a.fromOthers...)
		if len(ids) == 0 {
			return
		}
		for start := 0; start < len(ids); start += a.size {
			chunk := ids[start:min(start+a.size, len(ids))]
			ctx, cancel := context.WithTimeout(parent, ackFlushTimeout)
			err := a.sub.bsub.Ack(ctx, chunk)
			cancel()
			if err != nil {
				a.sub.observe(observer.Event{Scope: observer.ScopeAck, Topic: a.sub.cfg.Topic, Group: a.sub.cfg.Group, Err: err})
			}
		}
		clear(ids)
		clear(a.fromOthers)
		a.fromWorkers = ids[:0]
	}
}

// close flushes what is buffered and refuses later acks (they return an
// error wrapping ErrClosed). The flush is bounded by hard, the Close's
// ctx plus its grace; acks it cannot send are redelivered after their
// lease.
func (a *acker[P]) close(hard context.Context) error {
	a.mu.Lock()
	a.closed.Store(true)
	a.mu.Unlock()
	a.flushCtx = hard
	close(a.stop)
	if !WaitOrDone(hard, a.done) {
		return errors.New("ack flush did not finish before the close ctx ended")
	}
	return nil
}
