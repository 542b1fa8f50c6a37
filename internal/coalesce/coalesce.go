// Package coalesce combines concurrent Publish calls to one topic into
// backend batches (the bus's WithPublishBatching). A call that finds fewer
// than MaxBatches batches of its topic in flight goes to the backend at
// once, on the caller's goroutine and with the caller's ctx; calls that
// find the topic busy wait, and as soon as a batch returns the waiting
// calls are sent together as one backend batch. Each call still gets its
// own result, and one call's messages are never split over batches.
package coalesce

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eventbus-go/bus/backend"
)

// Config bounds the combined batches; every field is set (the bus applies
// defaults) unless Disabled.
type Config struct {
	MaxMessages int
	MaxBytes    int
	MaxBatches  int
	Disabled    bool
}

// Tracker counts operations in progress on the bus: a combined batch sent
// in the background joins it for as long as it runs.
type Tracker interface {
	Join()
	Leave()
}

// Coalescer combines concurrent publishes per topic. One mutex guards
// every topic's queue; it is held only to count and to move requests,
// never across backend I/O.
type Coalescer struct {
	be  backend.Backend
	cfg Config
	ops Tracker // the bus's operation count; batch senders join it

	mu     sync.Mutex
	topics map[string]*topicQueue // topics with a batch in flight, and a few idle ones
}

// topicQueue is the publishing state of one topic while a batch of it is
// in flight.
type topicQueue struct {
	running int           // batches in flight
	pending []*publishReq // calls waiting, oldest first
}

// Request states, guarded by Coalescer.mu.
const (
	reqPending   = iota // queued, not yet taken into a batch
	reqTaken            // part of a batch in flight
	reqAbandoned        // its caller's ctx ended while it was queued
)

// publishReq is one waiting Publish call. Its messages are the call's own
// copies, so the caller may return (its ctx ended) and reuse its buffers
// while the batch is still being sent.
type publishReq struct {
	ctx   context.Context
	msgs  []*backend.Message
	size  int
	state int
	done  chan error // buffered: the sender never blocks
}

// New returns a Coalescer that publishes to be; background batch senders
// join ops.
func New(be backend.Backend, cfg Config, ops Tracker) *Coalescer {
	return &Coalescer{be: be, cfg: cfg, ops: ops, topics: map[string]*topicQueue{}}
}

// Publish sends msgs to topic, alone or combined with other calls. The
// caller must hold an operation of ops (the bus's Publish does) and keeps
// msgs unchanged until publish returns.
func (c *Coalescer) Publish(ctx context.Context, topic string, msgs []*backend.Message) error {
	if c.cfg.Disabled {
		return c.be.Publish(ctx, topic, msgs)
	}
	c.mu.Lock()
	q := c.topics[topic]
	if q == nil {
		q = &topicQueue{}
		c.topics[topic] = q
	}
	if q.running < c.cfg.MaxBatches && len(q.pending) == 0 {
		q.running++
		c.mu.Unlock()
		err := c.be.Publish(ctx, topic, msgs)
		c.next(topic, q)
		return err
	}
	req := &publishReq{ctx: ctx, done: make(chan error, 1)}
	req.msgs, req.size = ownCopies(msgs)
	q.pending = append(q.pending, req)
	c.mu.Unlock()

	select {
	case err := <-req.done:
		return err
	case <-ctx.Done():
	}
	c.mu.Lock()
	if req.state == reqPending {
		req.state = reqAbandoned
		q.pending = removeReq(q.pending, req)
		c.mu.Unlock()
		return fmt.Errorf("not sent: %w", ctx.Err())
	}
	c.mu.Unlock()
	select {
	case err := <-req.done:
		return err
	default:
	}
	return fmt.Errorf("no answer, the messages may still be stored: %w", ctx.Err())
}

// next is called when a batch of topic returned: it starts the next
// combined batch when calls are waiting, and forgets the topic when
// nothing of it is in flight.
func (c *Coalescer) next(topic string, q *topicQueue) {
	c.mu.Lock()
	q.running--
	if len(q.pending) == 0 {
		c.idle(topic, q)
		c.mu.Unlock()
		return
	}
	batch := c.take(q)
	q.running++
	// A waiting call holds an operation of the bus, so Close has not
	// seen it idle; the sender joins before that call can leave.
	c.ops.Join()
	c.mu.Unlock()
	go c.sendLoop(topic, q, batch)
}

// keptIdleTopics is how many idle topics keep their queue, so a topic
// published to again and again does not allocate one per call; beyond it
// idle topics are forgotten, which bounds the memory of many topics.
const keptIdleTopics = 64

// idle forgets q when nothing of topic is in flight and many topics are
// known. c.mu is held.
func (c *Coalescer) idle(topic string, q *topicQueue) {
	if q.running == 0 && len(c.topics) > keptIdleTopics {
		delete(c.topics, topic)
	}
}

// take moves the oldest waiting calls, within the bounds, into a batch.
// c.mu is held and q.pending is not empty.
func (c *Coalescer) take(q *topicQueue) []*publishReq {
	n, count, size := 0, 0, 0
	for _, r := range q.pending {
		if n > 0 && (count+len(r.msgs) > c.cfg.MaxMessages || size+r.size > c.cfg.MaxBytes) {
			break
		}
		r.state = reqTaken
		n++
		count += len(r.msgs)
		size += r.size
	}
	batch := make([]*publishReq, n)
	copy(batch, q.pending)
	rest := copy(q.pending, q.pending[n:])
	clear(q.pending[rest:])
	q.pending = q.pending[:rest]
	return batch
}

// sendLoop sends batches of topic until no call waits.
func (c *Coalescer) sendLoop(topic string, q *topicQueue, batch []*publishReq) {
	defer c.ops.Leave()
	for {
		c.send(topic, batch)
		c.mu.Lock()
		if len(q.pending) == 0 {
			q.running--
			c.idle(topic, q)
			c.mu.Unlock()
			return
		}
		batch = c.take(q)
		c.mu.Unlock()
	}
}

// send publishes one combined batch and gives each call its own result.
func (c *Coalescer) send(topic string, batch []*publishReq) {
	total := 0
	for _, r := range batch {
		total += len(r.msgs)
	}
	all := make([]*backend.Message, 0, total)
	offsets := make([]int, len(batch)+1)
	for i, r := range batch {
		offsets[i] = len(all)
		all = append(all, r.msgs...)
	}
	offsets[len(batch)] = len(all)

	ctx, stop := batchContext(batch)
	err := c.be.Publish(ctx, topic, all)
	stop()

	var be *backend.BatchError
	if err == nil || !errors.As(err, &be) {
		for _, r := range batch {
			r.done <- err
		}
		return
	}
	per := make([][]backend.Failure, len(batch))
	for _, f := range be.Failed {
		i := sort.SearchInts(offsets[1:], f.Index+1)
		if i >= len(batch) || f.Index < 0 {
			continue // an index outside the batch: ignore what cannot be placed
		}
		per[i] = append(per[i], backend.Failure{Index: f.Index - offsets[i], Err: f.Err})
	}
	for i, r := range batch {
		switch {
		case len(per[i]) == 0:
			r.done <- nil
		case len(per[i]) == 1 && len(r.msgs) == 1:
			r.done <- per[i][0].Err
		default:
			r.done <- &backend.BatchError{Failed: per[i]}
		}
	}
}

// batchContext returns the ctx of a combined batch (see Context).
func batchContext(batch []*publishReq) (context.Context, func()) {
	ctxs := make([]context.Context, len(batch))
	for i, r := range batch {
		ctxs[i] = r.ctx
	}
	return Context(ctxs)
}

// Context returns the ctx of a batch that combines calls made with ctxs
// (at least one): it keeps the values of the first, ends when every one
// has ended, and carries the latest of their deadlines when each has one
// (a backend bounds its network waits by it). The func releases it.
func Context(ctxs []context.Context) (context.Context, func()) {
	if sameEnd(ctxs) {
		return ctxs[0], func() {}
	}
	base := context.WithoutCancel(ctxs[0])
	var latest time.Time
	bounded := true
	for _, c := range ctxs {
		dl, ok := c.Deadline()
		if !ok {
			bounded = false
			break
		}
		if dl.After(latest) {
			latest = dl
		}
	}
	var (
		ctx    context.Context
		cancel context.CancelFunc
	)
	if bounded {
		ctx, cancel = context.WithDeadline(base, latest)
	} else {
		ctx, cancel = context.WithCancel(base)
	}
	// Calls that end together (one Done channel, as a producer's ctx and
	// the values derived from it have) are watched once.
	var distinct []context.Context
	var last <-chan struct{}
	for _, c := range ctxs {
		done := c.Done()
		if done == nil {
			return ctx, cancel // a call that never ends keeps the batch going
		}
		if done != last {
			distinct = append(distinct, c)
			last = done
		}
	}
	var live atomic.Int64
	live.Store(int64(len(distinct)))
	stops := make([]func() bool, len(distinct))
	for i, c := range distinct {
		stops[i] = context.AfterFunc(c, func() {
			if live.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, s := range stops {
			s()
		}
		cancel()
	}
}

// sameEnd reports whether every ctx ends with the first (one Done
// channel, one deadline), as the calls of one producer's ctx do: the
// first is then the batch's ctx as it is.
func sameEnd(ctxs []context.Context) bool {
	done := ctxs[0].Done()
	dl, ok := ctxs[0].Deadline()
	for _, c := range ctxs[1:] {
		if c.Done() != done {
			return false
		}
		if d, o := c.Deadline(); o != ok || !d.Equal(dl) {
			return false
		}
	}
	return true
}

// ownCopies copies msgs (payloads, headers) so a waiting call's batch
// never reads its caller's buffers after the call returned. It returns the
// copies and their size as MaxBytes counts it.
func ownCopies(msgs []*backend.Message) ([]*backend.Message, int) {
	payload := 0
	for _, m := range msgs {
		payload += len(m.Payload)
	}
	slab := make([]byte, 0, payload)
	vals := make([]backend.Message, len(msgs))
	ptrs := make([]*backend.Message, len(msgs))
	size := 0
	for i, m := range msgs {
		v := &vals[i]
		*v = *m
		start := len(slab)
		slab = append(slab, m.Payload...)
		v.Payload = slab[start:len(slab):len(slab)]
		if m.Payload == nil {
			v.Payload = nil
		}
		if m.Headers != nil {
			v.Headers = maps.Clone(m.Headers)
		}
		ptrs[i] = v
		size += messageSize(m)
	}
	return ptrs, size
}

// messageSize is a message's size as PublishBatching.MaxBytes counts it.
func messageSize(m *backend.Message) int {
	n := len(m.ID) + len(m.Key) + len(m.Payload)
	for k, v := range m.Headers {
		n += len(k) + len(v)
	}
	return n
}

func removeReq(reqs []*publishReq, r *publishReq) []*publishReq {
	for i, x := range reqs {
		if x == r {
			copy(reqs[i:], reqs[i+1:])
			reqs[len(reqs)-1] = nil
			return reqs[:len(reqs)-1]
		}
	}
	return reqs
}

// Pending returns how many Publish calls to topic wait behind the batches
// in flight.
func (c *Coalescer) Pending(topic string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if q := c.topics[topic]; q != nil {
		return len(q.pending)
	}
	return 0
}

// TopicsKept returns how many topics the Coalescer keeps state for.
func (c *Coalescer) TopicsKept() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.topics)
}
