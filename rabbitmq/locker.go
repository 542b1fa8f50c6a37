package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/eventbus-go/bus/backend"
)

var _ backend.GroupLocker = (*Backend)(nil)

// heldLock is a group lock a holder of this backend holds: the exclusive
// queue of the lock, declared on the lock connection.
type heldLock struct {
	holder  string
	state   string           // the lock's state queue
	conn    *amqp.Connection // the lock connection that owns the queue
	expires time.Time
	timer   *time.Timer // lapses the lock at expires
	gen     uint64      // unique to this take of the lock (see lockTake)
}

// How a lock last changed hands, kept in its state queue.
const (
	lockTaken    = "held"
	lockLapsed   = "lapsed"
	lockReleased = "released"
)

// lockOp takes the backend's lock semaphore, bounded by ctx: lock
// operations of one backend run one at a time, so that a lapse and a
// renewal never cross. A ctx that has ended takes nothing, even with the
// semaphore free: an unlock that comes after its member's close ran out
// of time leaves the lock to lapse (see lapse, which gives back what the
// member still holds before the lock passes on), and never half-releases
// it on a dead ctx (a failed release breaks the lock connection, and
// with it every lock of the backend).
func (b *Backend) lockOp(ctx context.Context) (func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	select {
	case b.lockSem <- struct{}{}:
		return func() { <-b.lockSem }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// LockGroup implements backend.GroupLocker with an exclusive queue, which
// RabbitMQ lets one connection own: the lock is held while the queue
// exists. The holder's backend deletes it when ttl passes without a
// renewal, and the broker deletes it when the owning connection dies
// (two missed heartbeats). A renewal asks the broker whether the queue is
// still this connection's. Whether a lock is taken over is read from the
// lock's state queue, which keeps how the lock last changed hands.
func (b *Backend) LockGroup(ctx context.Context, topic, group, holder string, ttl time.Duration) (held, takeover bool, err error) {
	if err := validateLock(topic, group, holder); err != nil {
		return false, false, err
	}
	if ttl <= 0 {
		return false, false, fmt.Errorf("rabbitmq: lock group %q of %q: %w: ttl %v", group, topic, backend.ErrInvalidOption, ttl)
	}
	done, err := b.lockOp(ctx)
	if err != nil {
		return false, false, fmt.Errorf("rabbitmq: lock group %q of %q: %w", group, topic, err)
	}
	defer done()
	held, takeover, err = b.lockGroup(ctx, topic, group, holder, ttl)
	if err != nil {
		return false, false, fmt.Errorf("rabbitmq: lock group %q of %q: %w", group, topic, err)
	}
	return held, takeover, nil
}

func (b *Backend) lockGroup(ctx context.Context, topic, group, holder string, ttl time.Duration) (held, takeover bool, err error) {
	q := b.lockName(topic, group)
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return false, false, backend.ErrClosed
	}
	hl := b.locks[q]
	b.mu.Unlock()
	if hl != nil && hl.holder != holder {
		return false, false, nil // another holder of this backend holds it
	}
	conn, err := b.lockLink.get(ctx)
	if err != nil {
		return false, false, err
	}
	if hl != nil {
		if hl.conn == conn {
			err := b.onLockChannel(ctx, func(ch *amqp.Channel) error {
				_, err := ch.QueueDeclarePassive(q, false, false, true, false, nil)
				return err
			})
			if err == nil {
				b.mu.Lock()
				hl.expires = time.Now().Add(ttl)
				hl.timer.Reset(ttl)
				b.mu.Unlock()
				return true, false, nil
			}
			if !isAMQPCode(err, amqp.ResourceLocked, amqp.NotFound) {
				return false, false, err
			}
		}
		// The connection that owned the queue died, and the broker
		// deleted the queue with it: the lock is lost.
		b.dropLock(q, hl)
		b.handBack(ctx, q, hl.gen)
	}
	deleteQueue := func(ch *amqp.Channel) error { _, err := ch.QueueDelete(q, false, false, false); return err }
	err = b.onLockChannelUndo(ctx, func(ch *amqp.Channel) error {
		_, err := ch.QueueDeclare(q, false, false, true, false, amqp.Table{"x-queue-type": "classic"})
		return err
	}, deleteQueue)
	if isAMQPCode(err, amqp.ResourceLocked) {
		return false, false, nil
	}
	if err != nil {
		return false, false, err
	}
	hl = &heldLock{holder: holder, state: b.lockStateName(topic, group), conn: conn, expires: time.Now().Add(ttl)}
	last, err := b.swapLockState(ctx, hl.state, lockTaken)
	if err != nil {
		cctx, cancel := context.WithTimeout(context.Background(), b.opts.CloseTimeout)
		defer cancel()
		if b.onLockChannel(cctx, deleteQueue) != nil {
			b.lockLink.breakConn(conn) // the broker deletes the queue with its connection
		}
		return false, false, err
	}
	b.mu.Lock()
	hl.timer = time.AfterFunc(ttl, func() { b.lapse(q, hl) })
	b.lockSeq++
	hl.gen = b.lockSeq
	b.locks[q] = hl
	b.mu.Unlock()
	return true, last == lockTaken || last == lockLapsed, nil
}

// UnlockGroup implements backend.GroupLocker: the state queue records the
// release, then the lock's queue is deleted.
func (b *Backend) UnlockGroup(ctx context.Context, topic, group, holder string) error {
	if err := validateLock(topic, group, holder); err != nil {
		return err
	}
	done, err := b.lockOp(ctx)
	if err != nil {
		return fmt.Errorf("rabbitmq: unlock group %q of %q: %w", group, topic, err)
	}
	defer done()
	q := b.lockName(topic, group)
	b.mu.Lock()
	hl := b.locks[q]
	b.mu.Unlock()
	if hl == nil || hl.holder != holder {
		return nil
	}
	if err := b.giveUpLock(ctx, q, hl, lockReleased); err != nil {
		return fmt.Errorf("rabbitmq: unlock group %q of %q: %w", group, topic, err)
	}
	return nil
}

// lapse gives up a lock its holder did not renew within its ttl.
func (b *Backend) lapse(q string, hl *heldLock) {
	ctx, cancel := context.WithTimeout(context.Background(), b.opts.CloseTimeout)
	defer cancel()
	done, err := b.lockOp(ctx)
	if err != nil {
		// The lock connection is stuck: close it, the broker deletes
		// the queue.
		b.lockLink.breakConn(hl.conn)
		return
	}
	defer done()
	b.mu.Lock()
	if b.locks[q] != hl {
		b.mu.Unlock()
		return
	}
	if left := time.Until(hl.expires); left > 0 { // renewed meanwhile
		hl.timer.Reset(left)
		b.mu.Unlock()
		return
	}
	b.mu.Unlock()
	b.handBack(ctx, q, hl.gen)
	if err := b.giveUpLock(ctx, q, hl, lockLapsed); err != nil {
		b.lockLink.breakConn(hl.conn)
	}
}

// giveUpLock records how the lock changed hands, forgets it and deletes
// its queue. On an error the lock is forgotten all the same: the caller
// closes the lock connection or reports the error, and the broker deletes
// the queue when the connection closes.
func (b *Backend) giveUpLock(ctx context.Context, q string, hl *heldLock, how string) error {
	b.dropLock(q, hl)
	if conn, err := b.lockLink.get(ctx); err != nil || conn != hl.conn {
		return err // the queue died with its connection
	}
	if _, err := b.swapLockState(ctx, hl.state, how); err != nil {
		b.lockLink.breakConn(hl.conn)
		return err
	}
	err := b.onLockChannel(ctx, func(ch *amqp.Channel) error {
		_, err := ch.QueueDelete(q, false, false, false)
		return err
	})
	if err != nil {
		b.lockLink.breakConn(hl.conn)
	}
	return err
}

// lockTake returns the take of the lock queue q when a holder of this
// backend holds it: a number unique to each take of a lock on this
// backend, so that a subscription reads the group's release notes once
// per take (see Subscription.takeNotes).
func (b *Backend) lockTake(q string) (uint64, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	hl := b.locks[q]
	if hl == nil {
		return 0, false
	}
	return hl.gen, true
}

// dropLock forgets hl and stops its lapse.
func (b *Backend) dropLock(q string, hl *heldLock) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.locks[q] == hl {
		delete(b.locks, q)
	}
	if hl.timer != nil {
		hl.timer.Stop()
	}
}

// swapLockState replaces the content of the lock's state queue (one
// message at most) with how, confirmed, and returns what it held ("": the
// lock was never held). Only the lock's holder calls it.
func (b *Backend) swapLockState(ctx context.Context, state, how string) (string, error) {
	var last string
	err := b.onLockChannel(ctx, func(ch *amqp.Channel) error {
		if _, err := ch.QueueDeclare(state, true, false, false, false, amqp.Table{
			"x-queue-type": "classic",
			"x-max-length": 1,
			"x-overflow":   "drop-head",
		}); err != nil {
			return err
		}
		d, ok, err := ch.Get(state, true)
		if err != nil {
			return err
		}
		if ok {
			last = string(d.Body)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	errs, err := b.publishConfirmed(ctx, []string{""}, []string{state}, []amqp.Publishing{{DeliveryMode: amqp.Persistent, Body: []byte(how)}})
	if err == nil {
		err = errs[0]
	}
	return last, err
}

// onLockChannel runs f on a new channel of the lock connection, bounded
// by ctx, and closes the channel.
func (b *Backend) onLockChannel(ctx context.Context, f func(ch *amqp.Channel) error) error {
	return b.onLockChannelUndo(ctx, f, nil)
}

// onLockChannelUndo is onLockChannel; when ctx ends before f returns and
// f then succeeds, undo runs on the channel (a lock taken too late is
// given up). A slow broker never breaks the lock connection: the
// connection holds every lock of the backend, and only its death (two
// missed heartbeats on a dead network) gives them up.
func (b *Backend) onLockChannelUndo(ctx context.Context, f, undo func(ch *amqp.Channel) error) error {
	conn, err := b.lockLink.get(ctx)
	if err != nil {
		return err
	}
	type opened struct {
		ch  *amqp.Channel
		err error
	}
	open := make(chan opened, 1)
	go func() {
		ch, err := conn.Channel()
		open <- opened{ch, err}
	}()
	var ch *amqp.Channel
	select {
	case o := <-open:
		if o.err != nil {
			return fmt.Errorf("rabbitmq: open a channel: %w", o.err)
		}
		ch = o.ch
	case <-ctx.Done():
		go func() {
			if o := <-open; o.ch != nil {
				closeChannel(o.ch, b.opts.CloseTimeout)
			}
		}()
		return ctx.Err()
	}
	done := make(chan error, 1)
	go func() { done <- f(ch) }()
	select {
	case err = <-done:
		go closeChannel(ch, b.opts.CloseTimeout)
		return err
	case <-ctx.Done():
		go func() {
			if err := <-done; err == nil && undo != nil {
				_ = undo(ch)
			}
			closeChannel(ch, b.opts.CloseTimeout)
		}()
		return ctx.Err()
	}
}

// isAMQPCode reports whether err is an AMQP error with one of codes.
func isAMQPCode(err error, codes ...int) bool {
	var ae *amqp.Error
	if !errors.As(err, &ae) {
		return false
	}
	for _, c := range codes {
		if ae.Code == c {
			return true
		}
	}
	return false
}

func validateLock(topic, group, holder string) error {
	if err := validateStoredTopic(topic); err != nil {
		return fmt.Errorf("rabbitmq: lock group %q of %q: %w", group, topic, err)
	}
	if group == "" || holder == "" {
		return fmt.Errorf("rabbitmq: lock group %q of %q: %w: empty group or holder", group, topic, backend.ErrInvalidOption)
	}
	return nil
}
