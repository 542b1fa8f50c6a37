package bus

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/coalesce"
)

// This file holds the queues of PublishAsync. Each topic has a queue of
// requests in call order; a batch takes the oldest requests that may go,
// and a request with a Key may go only when no batch holding its key is
// in flight and no earlier request of its key still waits. One mutex
// guards every queue; it is held only to move requests and to count,
// never across backend I/O or a wait.

// asyncPublisher is the PublishAsync state of a Bus, made on first use.
type asyncPublisher struct {
	once sync.Once
	b    *Bus
	// window holds a slot per accepted message whose result is not
	// known yet.
	window *asyncWindow
	// chain is the publish middleware over asyncTerminal.
	chain      Publisher
	maxMsgs    int
	maxBytes   int
	maxBatches int
	eager      int // batches in flight below which any batch goes at once
	// each is the backend when it reports each message's outcome: a
	// message then completes when its outcome is known, not when its
	// batch's is.
	each backend.EachPublisher
	// maxRunning bounds the batches of a topic in flight: maxBatches, or
	// twice as many with each (see asyncState).
	maxRunning int

	mu     sync.Mutex
	topics map[string]*asyncTopic
	// gates are the Flush generations, oldest first: results join the
	// last; a Flush seals it and waits until it and every older one has
	// no result left.
	gates []*flushGate
}

// flushGate counts the results of one Flush generation; done is closed
// when they and every older generation's are known.
type flushGate struct {
	n    int
	done chan struct{}
}

// asyncTopic is the PublishAsync state of one topic.
type asyncTopic struct {
	name    string
	queue   []*asyncReq      // waiting requests, call order
	bytes   int              // the size of the ready requests in queue
	running int              // batches in flight
	busy    map[string]int   // keys of the requests in flight
	queued  map[string]int   // keys of the waiting requests
	paused  map[string]error // paused keys and the failure that paused them
}

// asyncReq is one message on its way: a PublishAsync call's, or one a
// publish middleware passed on.
type asyncReq struct {
	ctx   context.Context
	topic string
	key   string   // the order it takes: the caller's Key
	msg   *Message // the bus's copy; nil until ready
	// genID is the ID PublishAsync generated for the message, if any.
	genID string
	size  int // messageSize of msg, once ready and queued
	// ready is false while the publish middleware has not yet passed the
	// message on; the request holds its place (and its key) meanwhile.
	ready   bool
	claimed bool // the middleware passed it on, or returned without
	// reported and settled follow a request sent through each: its
	// outcome is known, and it completed (its result, its key and its
	// window room are given back), which waits for the earlier requests
	// of its key in its batch.
	reported bool
	settled  bool
	res      *PublishResult // known with err, without middleware
	wake     chan struct{}  // closed once err is set, with middleware
	err      error
}

// keptIdleAsyncTopics is how many idle topics keep their state.
const keptIdleAsyncTopics = 64

// asyncBatches is how many PublishAsync batches of a topic may be in
// flight at once, unless the backend's Capabilities.AsyncBatches or
// PublishBatching.MaxBatches allows more.
const asyncBatches = 8

// asyncState returns b's PublishAsync state, made on first use.
func (b *Bus) asyncState() *asyncPublisher {
	a := &b.async
	a.once.Do(func() {
		a.b = b
		cfg := b.opts.batching.config()
		window := b.opts.batching.window()
		// The window, not the coalescer, bounds what is in flight: a
		// topic keeps up to asyncBatches batches (more when the backend or
		// MaxBatches asks) of a share of the window each, full beyond the
		// first half of them (see room), so the backend holds nearly the whole window
		// while the producer fills the batch that follows one that
		// returned.
		a.maxMsgs, a.maxBytes = cfg.MaxMessages, cfg.MaxBytes
		a.maxBatches = max(cfg.MaxBatches, asyncBatches, b.caps.AsyncBatches)
		a.maxMsgs = max(1, min(a.maxMsgs, window/a.maxBatches))
		if cfg.Disabled {
			a.maxMsgs, a.maxBatches = 1, window
		}
		a.eager = max(1, a.maxBatches/2)
		// A waiting producer is woken when a quarter batch is free.
		a.window = newAsyncWindow(window, a.maxMsgs/4)
		a.maxRunning = a.maxBatches
		if each, ok := b.be.(backend.EachPublisher); ok {
			a.each = each
			// A batch in flight holds its slot until its last message
			// completes, while the window room of its first ones already
			// carries later messages: without more slots these would
			// wait for one in the queue.
			a.maxRunning = 2 * a.maxBatches
		}
		a.topics = map[string]*asyncTopic{}
		a.gates = []*flushGate{{done: make(chan struct{})}}
		var p Publisher = asyncTerminal{b}
		for i := len(b.opts.publishMW) - 1; i >= 0; i-- {
			if q := b.opts.publishMW[i](p); q != nil {
				p = q
			}
		}
		a.chain = p
	})
	return a
}

// acquire takes room for one message in the window, waiting until ctx
// ends.
func (a *asyncPublisher) acquire(ctx context.Context) error {
	return a.window.acquire(ctx)
}

// track counts res in the current Flush generation.
func (a *asyncPublisher) track(res *PublishResult) {
	a.mu.Lock()
	a.trackLocked(res)
	a.mu.Unlock()
}

// trackLocked is track with a.mu held.
func (a *asyncPublisher) trackLocked(res *PublishResult) {
	g := a.gates[len(a.gates)-1]
	g.n++
	res.gate = g
}

// seal ends the current Flush generation and returns it, or nil when no
// result is outstanding.
func (a *asyncPublisher) seal() *flushGate {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.gates) == 1 && a.gates[0].n == 0 {
		return nil
	}
	g := a.gates[len(a.gates)-1]
	a.gates = append(a.gates, &flushGate{done: make(chan struct{})})
	a.advance()
	return g
}

// advance closes the oldest generations that have no result left. a.mu
// is held.
func (a *asyncPublisher) advance() {
	for len(a.gates) > 1 && a.gates[0].n == 0 {
		close(a.gates[0].done)
		a.gates[0] = nil
		a.gates = a.gates[1:]
	}
}

// finish makes res known with err and gives back its window room and its
// operation of the bus.
func (a *asyncPublisher) finish(res *PublishResult, err error) {
	res.resolve(err)
	a.mu.Lock()
	res.gate.n--
	a.advance()
	a.mu.Unlock()
	a.window.release(1)
	a.b.ops.leave()
}

// complete makes the results of reqs known. The results are made known
// before a.mu is taken: a batch's many results do not hold up the
// queues.
func (a *asyncPublisher) complete(reqs []*asyncReq) {
	n := 0
	for _, r := range reqs {
		n += r.resolve()
	}
	if n == 0 {
		return
	}
	a.mu.Lock()
	for _, r := range reqs {
		if r.res != nil {
			r.res.gate.n--
		}
	}
	a.advance()
	a.mu.Unlock()
	a.release(n)
}

// completeLocked is complete for a few requests, with a.mu held; it
// returns how many results it made known, whose window room and
// operations are to be released.
func (a *asyncPublisher) completeLocked(reqs []*asyncReq) int {
	n := 0
	for _, r := range reqs {
		if r.resolve() == 1 {
			r.res.gate.n--
			n++
		}
	}
	if n > 0 {
		a.advance()
	}
	return n
}

// resolve makes r's result known, or wakes the middleware waiting for
// it, and returns 1 when r had a result.
func (r *asyncReq) resolve() int {
	if r.res == nil {
		close(r.wake)
		return 0
	}
	// The result may be kept long after: it keeps no message.
	r.msg, r.ctx = nil, nil
	r.res.msg = Message{}
	r.res.resolve(r.err)
	return 1
}

// release gives back the window room and the operations of n results
// made known.
func (a *asyncPublisher) release(n int) {
	if n > 0 {
		a.window.release(n)
		a.b.ops.leaveN(n)
	}
}

// topic returns the state of name, made when missing. a.mu is held.
func (a *asyncPublisher) topic(name string) *asyncTopic {
	t := a.topics[name]
	if t == nil {
		t = &asyncTopic{name: name, busy: map[string]int{}, queued: map[string]int{}, paused: map[string]error{}}
		a.topics[name] = t
	}
	return t
}

// idle forgets t when nothing of it is left and many topics are known.
// a.mu is held.
func (a *asyncPublisher) idle(t *asyncTopic) {
	if t.running == 0 && len(t.queue) == 0 && len(t.paused) == 0 && len(a.topics) > keptIdleAsyncTopics {
		delete(a.topics, t.name)
	}
}

// enqueue queues a ready request, or sends it at once when it may go and
// the topic has room for a batch. A request with a result is counted in
// the current Flush generation.
func (a *asyncPublisher) enqueue(r *asyncReq) {
	a.mu.Lock()
	if r.res != nil {
		a.trackLocked(r.res)
	}
	t := a.topic(r.topic)
	if err := t.pausedErr(r); err != nil {
		r.err = err
		a.mu.Unlock()
		a.complete([]*asyncReq{r})
		return
	}
	if t.running < a.eager && (r.key == "" || t.busy[r.key] == 0 && t.queued[r.key] == 0) {
		// Every waiting request is held back (by its key, or by a
		// message the middleware has not passed on yet): r goes alone.
		t.running++
		t.markBusy(r)
		a.mu.Unlock()
		a.start(t, []*asyncReq{r})
		return
	}
	t.push(r)
	if !a.room(t) {
		a.mu.Unlock()
		return
	}
	batches, dropped := a.pump(t)
	a.mu.Unlock()
	a.complete(dropped)
	a.startAll(t, batches)
}

// reserve queues a placeholder: its message follows when the middleware
// passes it on (fill) or never (drop).
func (a *asyncPublisher) reserve(ph *asyncReq) {
	a.mu.Lock()
	a.topic(ph.topic).push(ph)
	a.mu.Unlock()
}

// claim reports whether ph was not claimed yet, and claims it.
func (a *asyncPublisher) claim(ph *asyncReq) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if ph.claimed {
		return false
	}
	ph.claimed = true
	return true
}

// fill gives a placeholder its message; it may go now.
func (a *asyncPublisher) fill(ph *asyncReq, m *Message) {
	a.mu.Lock()
	t := a.topics[ph.topic] // kept: ph is in its queue
	ph.msg, ph.ready, ph.size = m, true, messageSize(m)
	t.bytes += ph.size
	batches, dropped := a.pump(t)
	a.mu.Unlock()
	a.complete(dropped)
	a.startAll(t, batches)
}

// drop removes a placeholder whose message is not sent, with err as its
// result; a failure pauses its key.
func (a *asyncPublisher) drop(ph *asyncReq, err error) {
	a.mu.Lock()
	t := a.topics[ph.topic]
	for i, r := range t.queue {
		if r == ph {
			copy(t.queue[i:], t.queue[i+1:])
			t.queue[len(t.queue)-1] = nil
			t.queue = t.queue[:len(t.queue)-1]
			t.unqueue(ph)
			break
		}
	}
	ph.err = err
	var swept []*asyncReq
	if err != nil && t.pause(ph.key, err) {
		swept = t.sweep()
	}
	batches, dropped := a.pump(t)
	a.idle(t)
	a.mu.Unlock()
	a.complete(append(append([]*asyncReq{ph}, swept...), dropped...))
	a.startAll(t, batches)
}

// unclaimed ends a placeholder the middleware returned from without
// passing its message on.
func (a *asyncPublisher) unclaimed(ph *asyncReq, err error) {
	if a.claim(ph) {
		a.drop(ph, err)
	}
}

// pauseKey pauses key on topic after cause, a message of it that was not
// accepted.
func (a *asyncPublisher) pauseKey(topic, key string, cause error) {
	if key == "" {
		return
	}
	a.mu.Lock()
	t := a.topic(topic)
	var swept []*asyncReq
	if t.pause(key, cause) {
		swept = t.sweep()
	}
	a.mu.Unlock()
	a.complete(swept)
}

// resume lets key's messages on topic go again.
func (a *asyncPublisher) resume(topic, key string) {
	a.mu.Lock()
	if t := a.topics[topic]; t != nil {
		delete(t.paused, key)
		a.idle(t)
	}
	a.mu.Unlock()
}

// pump takes batches of t while it has room for them, and returns them
// with the requests dropped on the way. a.mu is held.
func (a *asyncPublisher) pump(t *asyncTopic) (batches [][]*asyncReq, dropped []*asyncReq) {
	for len(t.queue) > 0 && a.room(t) {
		batch := a.take(t, &dropped)
		if batch == nil {
			break
		}
		t.running++
		batches = append(batches, batch)
	}
	return batches, dropped
}

// room reports whether t may start another batch. While fewer than half
// of maxBatches are in flight, any batch goes, a single message too, so
// light load sees no added latency. Beyond, up to maxBatches, a batch
// goes once the waiting messages fill one, and fewer wait until they do
// or batches return: the batches in flight stay full, and the messages
// waiting hold little of the window, so the backend holds nearly all of
// it. a.mu is held.
func (a *asyncPublisher) room(t *asyncTopic) bool {
	return t.running < a.eager || t.running < a.maxRunning && (len(t.queue) >= a.maxMsgs || t.bytes >= a.maxBytes)
}

// take moves the oldest requests of t that may go, within the batch
// bounds, into a batch, and the requests that will never go (their key
// is paused, their ctx ended) to *dropped. a.mu is held.
func (a *asyncPublisher) take(t *asyncTopic, dropped *[]*asyncReq) []*asyncReq {
	var (
		batch   []*asyncReq
		blocked map[string]bool // keys held back by an earlier request
		size    int
		full    bool
	)
	keep := t.queue[:0]
	for _, r := range t.queue {
		if full {
			keep = append(keep, r)
			continue
		}
		if !r.ready {
			if r.key != "" {
				if blocked == nil {
					blocked = map[string]bool{}
				}
				blocked[r.key] = true
			}
			keep = append(keep, r)
			continue
		}
		if err := t.pausedErr(r); err != nil {
			r.err = err
			t.unqueue(r)
			*dropped = append(*dropped, r)
			continue
		}
		if err := r.ctx.Err(); err != nil {
			r.err = fmt.Errorf("bus: publish %q: not sent: %w", t.name, err)
			t.unqueue(r)
			t.pause(r.key, r.err)
			*dropped = append(*dropped, r)
			continue
		}
		if r.key != "" && (t.busy[r.key] > 0 || blocked[r.key]) {
			keep = append(keep, r)
			continue
		}
		n := r.size
		if len(batch) > 0 && (len(batch)+1 > a.maxMsgs || size+n > a.maxBytes) {
			full = true
			keep = append(keep, r)
			continue
		}
		batch = append(batch, r)
		size += n
		t.unqueue(r)
	}
	clear(t.queue[len(keep):])
	t.queue = keep
	for _, r := range batch {
		t.markBusy(r)
	}
	return batch
}

// start sends batch on a goroutine the bus's Close waits for; the
// requests in it hold operations of the bus, so it joins.
func (a *asyncPublisher) start(t *asyncTopic, batch []*asyncReq) {
	a.b.ops.join()
	go a.sendLoop(t, batch)
}

func (a *asyncPublisher) startAll(t *asyncTopic, batches [][]*asyncReq) {
	for _, batch := range batches {
		a.start(t, batch)
	}
}

// sendLoop sends batch, then the batches its result lets go, until none
// is left for it.
func (a *asyncPublisher) sendLoop(t *asyncTopic, batch []*asyncReq) {
	defer a.b.ops.leave()
	for batch != nil {
		each := a.each != nil && a.sendEach(t, batch)
		var errs []error
		if !each {
			errs = a.send(t.name, batch)
		}
		a.mu.Lock()
		t.running--
		var swept []*asyncReq
		if !each {
			paused := false
			for i, r := range batch {
				t.unbusy(r)
				r.err = errs[i]
				if r.err != nil && t.pause(r.key, r.err) {
					paused = true
				}
			}
			if paused {
				swept = t.sweep()
			}
		}
		batches, dropped := a.pump(t)
		a.idle(t)
		a.mu.Unlock()
		if !each {
			a.complete(batch)
		}
		a.complete(swept)
		a.complete(dropped)
		batch = nil
		if len(batches) > 0 {
			batch = batches[0]
			a.startAll(t, batches[1:])
		}
	}
}

// batchOf returns the messages of batch, their generated IDs, and a
// context that ends when every request's context has ended; stop
// releases it.
func batchOf(batch []*asyncReq) (msgs []*Message, gen generatedIDs, ctx context.Context, stop func()) {
	msgs = make([]*Message, len(batch))
	ctxs := make([]context.Context, len(batch))
	var ids []byte
	for i, r := range batch {
		msgs[i], ctxs[i] = r.msg, r.ctx
		ids = append(ids, r.genID...)
	}
	ctx, stop = coalesce.Context(ctxs)
	return msgs, generatedIDs(ids), ctx, stop
}

// send publishes the messages of batch as one batch and returns each
// request's error, as Publish would have returned it for that message
// alone.
func (a *asyncPublisher) send(topic string, batch []*asyncReq) []error {
	msgs, gen, ctx, stop := batchOf(batch)
	err := a.b.publishValid(ctx, topic, msgs, gen, true)
	stop()
	errs := make([]error, len(batch))
	if err == nil {
		return errs
	}
	var pe *PublishError
	if !errors.As(err, &pe) {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	for _, f := range pe.Failed {
		if f.Index >= 0 && f.Index < len(errs) {
			errs[f.Index] = &PublishError{Topic: topic, Failed: []backend.Failure{{ID: f.ID, Err: f.Err}}}
		}
	}
	return errs
}

// sendEach sends batch through the backend's EachPublisher, completing
// each request as its outcome is reported, and reports whether it did:
// a partitioned topic's batch goes through send.
func (a *asyncPublisher) sendEach(t *asyncTopic, batch []*asyncReq) bool {
	msgs, gen, ctx, stop := batchOf(batch)
	defer stop()
	n, err := a.b.partitionsOf(ctx, t.name)
	if err == nil && n > 1 {
		return false
	}
	if err == nil {
		buf := spiBatch(msgs, gen)
		err = a.each.PublishEach(ctx, t.name, buf.ptrs, func(i int, err error) {
			a.settle(t, batch, i, err, false)
		})
		putPublishBuf(buf)
	}
	if err == nil {
		err = errors.New("the backend reported no outcome")
	}
	err = fmt.Errorf("bus: publish %q: %w", t.name, err)
	for i := range batch {
		a.settle(t, batch, i, err, true)
	}
	return true
}

// settle records err as the outcome of batch[i], sent through each, unless
// it has one (a backend's report is ignored then, and so is a whole
// batch's error, which is final). It completes the request, and the
// later ones of its key in batch that were held back by it, unless an
// earlier request of its key in batch did not complete yet: a key's
// results complete in call order. A backend's failure is the message's
// PublishError, a failure of the whole batch is err as it is.
func (a *asyncPublisher) settle(t *asyncTopic, batch []*asyncReq, i int, err error, whole bool) {
	a.mu.Lock()
	r := batch[i]
	if r.reported {
		a.mu.Unlock()
		return
	}
	if err != nil && !whole {
		err = &PublishError{Topic: t.name, Failed: []backend.Failure{{ID: r.msg.ID, Err: err}}}
	}
	r.err, r.reported = err, true
	if r.key != "" {
		for _, q := range batch[:i] {
			if q.key == r.key && !q.settled {
				a.mu.Unlock()
				return
			}
		}
	}
	var done [1]*asyncReq
	out := append(done[:0], r)
	if r.key != "" {
		for _, q := range batch[i+1:] {
			if q.key != r.key {
				continue
			}
			if !q.reported {
				break
			}
			out = append(out, q)
		}
	}
	paused := false
	for _, q := range out {
		q.settled = true
		t.unbusy(q)
		if q.err != nil && t.pause(q.key, q.err) {
			paused = true
		}
	}
	n := a.completeLocked(out)
	if paused {
		n += a.completeLocked(t.sweep())
	}
	a.mu.Unlock()
	a.release(n)
}

// push queues r. a.mu is held.
func (t *asyncTopic) push(r *asyncReq) {
	t.queue = append(t.queue, r)
	if r.ready {
		r.size = messageSize(r.msg)
		t.bytes += r.size
	}
	if r.key != "" {
		t.queued[r.key]++
	}
}

// unqueue uncounts r, which left the queue. a.mu is held.
func (t *asyncTopic) unqueue(r *asyncReq) {
	t.bytes -= r.size
	if r.key == "" {
		return
	}
	if t.queued[r.key]--; t.queued[r.key] <= 0 {
		delete(t.queued, r.key)
	}
}

func (t *asyncTopic) markBusy(r *asyncReq) {
	if r.key != "" {
		t.busy[r.key]++
	}
}

func (t *asyncTopic) unbusy(r *asyncReq) {
	if r.key == "" {
		return
	}
	if t.busy[r.key]--; t.busy[r.key] <= 0 {
		delete(t.busy, r.key)
	}
}

// pause pauses key after cause, and reports whether it was not paused.
// a.mu is held.
func (t *asyncTopic) pause(key string, cause error) bool {
	if key == "" {
		return false
	}
	if _, ok := t.paused[key]; ok {
		return false
	}
	t.paused[key] = cause
	return true
}

// pausedErr is the error of r when its key is paused, or nil. a.mu is
// held.
func (t *asyncTopic) pausedErr(r *asyncReq) error {
	if r.key == "" {
		return nil
	}
	cause, ok := t.paused[r.key]
	if !ok {
		return nil
	}
	return fmt.Errorf("bus: publish %q: key %q: %w: %w", t.name, r.key, ErrPublishPaused, cause)
}

// sweep removes the ready requests of paused keys from the queue, with
// their error set, and returns them. a.mu is held.
func (t *asyncTopic) sweep() []*asyncReq {
	var out []*asyncReq
	keep := t.queue[:0]
	for _, r := range t.queue {
		if r.ready {
			if err := t.pausedErr(r); err != nil {
				r.err = err
				t.unqueue(r)
				out = append(out, r)
				continue
			}
		}
		keep = append(keep, r)
	}
	clear(t.queue[len(keep):])
	t.queue = keep
	return out
}

// messageSize is a message's size as PublishBatching.MaxBytes counts it.
func messageSize(m *Message) int {
	n := len(m.ID) + len(m.Key) + len(m.Payload)
	for k, v := range m.Headers {
		n += len(k) + len(v)
	}
	return n
}
