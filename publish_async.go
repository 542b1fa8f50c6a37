package bus

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/msgid"
)

// ErrPublishPaused: PublishAsync did not send a message because an earlier
// PublishAsync message with the same Key on the same topic failed, and the
// key has not been resumed (see Bus.ResumePublish). The error also wraps
// the failure that paused the key.
var ErrPublishPaused = errors.New("publishing of the key is paused after a failure")

// PublishResult is the outcome of one PublishAsync call, known once Done
// is closed. It is safe for concurrent use.
type PublishResult struct {
	// known is set once err is; done, made by the first Done or Get
	// that has to wait, is closed then.
	known atomic.Bool
	mu    sync.Mutex
	done  chan struct{}
	err   error
	gate  *flushGate // the Flush generation that waits for it
	req   asyncReq   // the message on its way, without publish middleware
	msg   Message    // the bus's copy of the message without middleware, until sent
}

// closedDone is the Done channel of a result known at once.
var closedDone = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// failedResult returns a result that carries err at once.
func failedResult(err error) *PublishResult {
	r := &PublishResult{done: closedDone, err: err}
	r.known.Store(true)
	return r
}

// resolve makes r known with err.
func (r *PublishResult) resolve(err error) {
	r.err = err
	r.mu.Lock()
	r.known.Store(true)
	if r.done != nil {
		close(r.done)
	}
	r.mu.Unlock()
}

// Done returns a channel closed when the result is known.
func (r *PublishResult) Done() <-chan struct{} {
	if r.known.Load() {
		return closedDone
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.known.Load() {
		return closedDone
	}
	if r.done == nil {
		r.done = make(chan struct{})
	}
	return r.done
}

// Get waits until the result is known and returns it: nil when the
// backend stored the message, with the guarantee of a nil error from
// Publish. An error is what Publish would have returned for the message
// alone: a *PublishError listing it (Rejected when it was invalid and
// nothing was sent), or a wrapped error (ErrClosed, ErrPublishPaused, the
// ctx of the PublishAsync call, a backend failure). When ctx ends first,
// Get returns ctx's error and the result is still to come.
func (r *PublishResult) Get(ctx context.Context) error {
	if r.known.Load() {
		return r.err
	}
	select {
	case <-r.Done():
		return r.err
	case <-ctx.Done():
		return fmt.Errorf("bus: publish result: %w", ctx.Err())
	}
}

// PublishAsync publishes msg to topic and returns at once with a result
// that is known once the backend confirmed the message (or it failed),
// for producers that emit one message at a time: the bus keeps several
// batches of such messages in flight instead of a round trip per call.
//
// It assigns msg an ID when it has none and validates it as Publish does,
// before any I/O: an invalid message or topic, a closed bus, an invalid
// option or a ctx that ended already make a result that is known at once
// and carries the error (for ctx, wrapping ctx.Err() as Publish does),
// and nothing is sent; a keyed message refused for its ctx pauses its key
// (see Order). The bus then copies msg (payload and headers), so the
// caller may reuse it when PublishAsync returns.
//
// Messages wait in a window of PublishBatching.Window messages (default
// 1,000) per Bus until their result is known; a PublishAsync that finds it
// full waits for room, until ctx ends (the result then carries ctx's
// error), and goes on once a quarter of a batch (below) is free. Waiting messages of a topic are sent as batches within the
// bounds of PublishBatching.MaxMessages and MaxBytes and of Window/B
// messages, up to B batches of a topic in flight, where B is the largest
// of 8, the backend's Capabilities.AsyncBatches and MaxBatches. While
// fewer than B/2 are in flight a batch goes at once, of a single message
// too; beyond, a batch goes once the waiting messages fill one, and fewer
// wait until they do or fewer than B/2 are in flight: the backend holds
// nearly the whole window while the producer fills the next batch. A
// message's result, and its room in the window, come when its batch
// returns, or, on a backend that reports each message's outcome as it
// arrives (backend.EachPublisher), when its own outcome does, after those
// of the earlier messages of its key in the batch; such a backend may
// have 2*B batches of a topic in flight. These batches go to the backend as
// they are, not combined with Publish calls; with Disabled each message
// is a batch of its own, and the window alone bounds them. The messages
// go through the publish middleware one call per message, on a goroutine
// of the bus, with ctx and its values.
//
// Order: the messages of one Key on one topic are stored in the order of
// their PublishAsync calls (calls from one goroutine, or otherwise
// ordered); a batch holding a key is not sent while an earlier batch
// holding it is in flight. Messages without a Key are not ordered, and
// PublishAsync and Publish calls are not ordered with each other (Flush
// first). When a keyed message fails (at the backend, or its ctx ended
// before it was sent), the key pauses on that topic: its later
// PublishAsync messages that were not sent yet, and those of later calls,
// fail with an error wrapping ErrPublishPaused, until ResumePublish. The
// caller can then publish the failed messages again, in order, before
// newer ones. A backend that fails part of one batch may still store a
// later message of the key from that batch; its result says so (nil).
//
// ctx bounds the message's life: a message whose ctx ends before it is
// sent (while PublishAsync waits for room, too) is not sent; a batch in
// flight is abandoned only when the ctx of every message in it has ended. Flush waits for every result; Close
// waits for them within its ctx.
func (b *Bus) PublishAsync(ctx context.Context, topic string, msg *Message) *PublishResult {
	if err := b.asyncPrecheck(topic); err != nil {
		return failedResult(err)
	}
	genID := ""
	if msg != nil && msg.ID == "" {
		msg.ID = msgid.New()
		genID = msg.ID
	}
	return b.publishAsyncAssigned(ctx, topic, msg, genID)
}

// asyncPrecheck is what PublishAsync refuses before it assigns an ID.
func (b *Bus) asyncPrecheck(topic string) error {
	if b.optErr != nil {
		return b.optErr
	}
	if err := backend.ValidateTopic(topic); err != nil {
		return fmt.Errorf("bus: publish: %w", err)
	}
	return nil
}

// publishAsyncAssigned is PublishAsync after asyncPrecheck, once msg has
// an ID; genID is that ID when the bus generated it.
func (b *Bus) publishAsyncAssigned(ctx context.Context, topic string, msg *Message, genID string) *PublishResult {
	if err := b.checkMessage(msg); err != nil {
		id := ""
		if msg != nil {
			id = msg.ID
		}
		return failedResult(&PublishError{Topic: topic, Failed: []backend.Failure{{ID: id, Err: err}}, Rejected: true})
	}
	if !b.ops.enter() {
		return failedResult(fmt.Errorf("bus: publish %q: %w", topic, ErrClosed))
	}
	a := b.asyncState()
	if err := ctx.Err(); err != nil {
		// As Publish: a ctx that ended is the error, before any I/O.
		err = fmt.Errorf("bus: publish %q: %w", topic, err)
		a.pauseKey(topic, msg.Key, err)
		b.ops.leave()
		return failedResult(err)
	}
	if err := a.acquire(ctx); err != nil {
		err = fmt.Errorf("bus: publish %q: waiting for room in the publish window: %w", topic, err)
		a.pauseKey(topic, msg.Key, err)
		b.ops.leave()
		return failedResult(err)
	}
	res := &PublishResult{}
	if len(b.opts.publishMW) == 0 {
		cp := &res.msg
		copyMessage(cp, msg)
		res.req = asyncReq{ctx: ctx, topic: topic, key: cp.Key, msg: cp, genID: genID, ready: true, res: res}
		a.enqueue(&res.req)
		return res
	}
	// The middleware may keep the message it is given: it gets one of its
	// own.
	cp := new(Message)
	copyMessage(cp, msg)
	a.track(res)
	// The middleware runs on a goroutine of its own; the message's place
	// in its key's order is taken now, and filled when the middleware
	// calls the publisher under it.
	ph := &asyncReq{ctx: ctx, topic: topic, key: cp.Key, genID: genID, wake: make(chan struct{})}
	a.reserve(ph)
	go func() {
		err := a.chain.Publish(context.WithValue(ctx, placeholderKey{}, ph), topic, cp)
		a.unclaimed(ph, err)
		a.finish(res, err)
	}()
	return res
}

// Flush waits until the result of every PublishAsync call made before it
// is known, or until ctx ends. Each result carries its own error; Flush
// returns only ctx's.
func (b *Bus) Flush(ctx context.Context) error {
	if b.optErr != nil {
		return b.optErr
	}
	g := b.asyncState().seal()
	if g == nil {
		return nil
	}
	select {
	case <-g.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("bus: flush: %w", ctx.Err())
	}
}

// ResumePublish lets PublishAsync send messages with key on topic again
// after a failure paused the key (see PublishAsync). It does nothing for
// a key that is not paused.
func (b *Bus) ResumePublish(topic, key string) {
	b.asyncState().resume(topic, key)
}

// copyMessage makes dst a copy of m that shares no buffer with it.
func copyMessage(dst, m *Message) {
	*dst = *m
	if m.Payload != nil {
		dst.Payload = append(make([]byte, 0, len(m.Payload)), m.Payload...)
	}
	if m.Headers != nil {
		dst.Headers = maps.Clone(m.Headers)
	}
}

// placeholderKey carries, in the ctx a PublishAsync passes its publish
// middleware, the place the message took in its key's order.
type placeholderKey struct{}

// asyncTerminal is the publisher under the publish middleware of
// PublishAsync: the message the middleware passes on takes the place
// PublishAsync reserved for it. Anything else it is given (another topic,
// several messages, a second call) is queued after what is waiting, one
// request per message; it waits for the results and returns them as
// Publish would.
type asyncTerminal struct{ b *Bus }

func (t asyncTerminal) Publish(ctx context.Context, topic string, msgs ...*Message) error {
	if err := backend.ValidateTopic(topic); err != nil {
		return fmt.Errorf("bus: publish: %w", err)
	}
	a := t.b.asyncState()
	if ph, ok := ctx.Value(placeholderKey{}).(*asyncReq); ok && len(msgs) == 1 && topic == ph.topic && a.claim(ph) {
		if err := t.b.checkMessage(msgs[0]); err != nil {
			err = &PublishError{Topic: topic, Failed: []backend.Failure{{ID: idOf(msgs[0]), Err: err}}, Rejected: true}
			a.drop(ph, err)
			return err
		}
		a.fill(ph, msgs[0])
		<-ph.wake
		return ph.err
	}
	var failed []backend.Failure
	for i, m := range msgs {
		if err := t.b.checkMessage(m); err != nil {
			failed = append(failed, backend.Failure{Index: i, ID: idOf(m), Err: err})
		}
	}
	if failed != nil {
		return &PublishError{Topic: topic, Failed: failed, Rejected: true}
	}
	reqs := make([]*asyncReq, len(msgs))
	for i, m := range msgs {
		reqs[i] = &asyncReq{ctx: ctx, topic: topic, key: m.Key, msg: m, ready: true, wake: make(chan struct{})}
		a.enqueue(reqs[i])
	}
	var whole error
	for i, r := range reqs {
		<-r.wake
		var pe *PublishError
		switch {
		case r.err == nil:
		case errors.As(r.err, &pe):
			for _, f := range pe.Failed {
				failed = append(failed, backend.Failure{Index: i, ID: f.ID, Err: f.Err})
			}
		default:
			whole = r.err
			failed = append(failed, backend.Failure{Index: i, ID: r.msg.ID, Err: r.err})
		}
	}
	if len(failed) == len(msgs) && whole != nil && len(msgs) == 1 {
		return whole
	}
	if failed != nil {
		return &PublishError{Topic: topic, Failed: failed}
	}
	return nil
}

func idOf(m *Message) string {
	if m == nil {
		return ""
	}
	return m.ID
}
