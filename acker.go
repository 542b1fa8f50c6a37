package bus

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/observer"
)

// ackFlushTimeout bounds one flush of acks to the backend. Flushes run on
// a detached ctx so they survive shutdown.
const ackFlushTimeout = 10 * time.Second

// acker batches acks of one subscription into few backend calls: a flush
// happens when size ids are waiting or interval after the first one
// arrived, and once more on close.
type acker struct {
	sub      *Subscription
	size     int
	interval time.Duration

	mu     sync.Mutex
	buf    []backend.AckID
	spare  []backend.AckID
	closed bool

	kick chan struct{} // first id of a batch arrived, or the batch is full
	stop chan struct{}
	done chan struct{}

	// flushCtx bounds the final flush by the Close ctx; set before stop
	// is closed.
	flushCtx context.Context
}

func newAcker(s *Subscription, size int, interval time.Duration) *acker {
	return &acker{
		sub: s, size: size, interval: interval,
		buf:  make([]backend.AckID, 0, size),
		kick: make(chan struct{}, 1),
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
}

func (a *acker) add(id backend.AckID) error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return ErrClosed
	}
	a.buf = append(a.buf, id)
	n := len(a.buf)
	a.mu.Unlock()
	if n == 1 || n >= a.size {
		select {
		case a.kick <- struct{}{}:
		default:
		}
	}
	return nil
}

func (a *acker) run() {
	defer close(a.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-a.stop:
			a.flush(a.flushCtx)
			return
		case <-a.kick:
		}
		if a.pending() < a.size {
			timer.Reset(a.interval)
			select {
			case <-timer.C:
			case <-a.kick:
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

func (a *acker) pending() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.buf)
}

// flush sends everything buffered, in chunks of at most size. Each chunk
// gets ackFlushTimeout, and no more than parent allows.
func (a *acker) flush(parent context.Context) {
	for {
		a.mu.Lock()
		ids := a.buf
		if len(ids) == 0 {
			a.mu.Unlock()
			return
		}
		a.buf = a.spare[:0]
		a.mu.Unlock()
		for start := 0; start < len(ids); start += a.size {
			chunk := ids[start:min(start+a.size, len(ids))]
			ctx, cancel := context.WithTimeout(parent, ackFlushTimeout)
			err := a.sub.bsub.Ack(ctx, chunk)
			cancel()
			if err != nil {
				a.sub.bus.observe(observer.Event{Scope: observer.ScopeAck, Topic: a.sub.topic, Group: a.sub.opts.group, Err: err})
			}
		}
		clear(ids)
		a.mu.Lock()
		a.spare = ids[:0]
		a.mu.Unlock()
	}
}

// close flushes what is buffered and refuses later acks (they return an
// error wrapping ErrClosed). The flush is bounded by hard, the Close's
// ctx plus its grace; acks it cannot send are redelivered after their
// lease.
func (a *acker) close(hard context.Context) error {
	a.mu.Lock()
	a.closed = true
	a.mu.Unlock()
	a.flushCtx = hard
	close(a.stop)
	if !waitOrDone(hard, a.done) {
		return errors.New("ack flush did not finish before the close ctx ended")
	}
	return nil
}
