package nats

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/eventbus-go/bus/backend"
)

// Publish implements backend.Backend. In JetStream mode the batch is
// published asynchronously within the publish window and Publish returns
// when the server acknowledged (stored) every message, or ctx ended;
// messages whose acknowledgement did not arrive are listed as failed and
// may still have been stored (republishing them is safe: the server
// deduplicates on Nats-Msg-Id). In core mode the batch is written to the
// connection and flushed, which confirms that the server received it, not
// that anyone consumed it.
func (b *Backend) Publish(ctx context.Context, topic string, msgs []*backend.Message) error {
	if b.closed.Load() {
		return fmt.Errorf("nats: publish %q: %w", topic, backend.ErrClosed)
	}
	if len(msgs) == 0 {
		return nil
	}
	var err error
	if b.opts.CoreNATS {
		err = b.publishCore(ctx, topic, msgs)
	} else {
		var errs []error
		if errs, err = b.publishJS(ctx, topic, msgs, nil); err == nil {
			fs := failures{n: len(msgs)}
			for i, e := range errs {
				if e != nil {
					fs.add(i, e)
				}
			}
			err = fs.result()
		}
	}
	if err != nil {
		var be *backend.BatchError
		if errors.As(err, &be) {
			return err
		}
		return fmt.Errorf("nats: publish %q: %w", topic, err)
	}
	return nil
}

// PublishEach implements backend.EachPublisher. In JetStream mode a
// message is reported stored as soon as the server acknowledged it; a
// failure is reported once the batch's wait ends, as Publish would list
// it. In core mode every message is reported once the batch is flushed.
func (b *Backend) PublishEach(ctx context.Context, topic string, msgs []*backend.Message, report func(i int, err error)) error {
	if b.closed.Load() {
		return fmt.Errorf("nats: publish %q: %w", topic, backend.ErrClosed)
	}
	if len(msgs) == 0 {
		return nil
	}
	if b.opts.CoreNATS {
		err := b.publishCore(ctx, topic, msgs)
		var be *backend.BatchError
		if err != nil && !errors.As(err, &be) {
			return fmt.Errorf("nats: publish %q: %w", topic, err)
		}
		next := 0
		if be != nil {
			for _, f := range be.Failed {
				for ; next < f.Index; next++ {
					report(next, nil)
				}
				report(f.Index, f.Err)
				next = f.Index + 1
			}
		}
		for ; next < len(msgs); next++ {
			report(next, nil)
		}
		return nil
	}
	errs, err := b.publishJS(ctx, topic, msgs, report)
	if err != nil {
		return fmt.Errorf("nats: publish %q: %w", topic, err)
	}
	for i, e := range errs {
		if e != errReported {
			report(i, e)
		}
	}
	return nil
}

// failures collects the failed indexes of a batch.
type failures struct {
	n      int
	failed []backend.Failure
}

func (f *failures) add(i int, err error) {
	f.failed = append(f.failed, backend.Failure{Index: i, Err: err})
}

// result is nil when nothing failed, the error itself when every message
// failed for the same reason, and a *BatchError otherwise.
func (f *failures) result() error {
	switch {
	case len(f.failed) == 0:
		return nil
	case len(f.failed) == 1 && f.n == 1:
		return f.failed[0].Err
	}
	return &backend.BatchError{Failed: f.failed}
}

// Pipelining. A batch goes out with async publishes, and Publish then
// waits for that batch's acks only: the window of outstanding acks
// (Options.PublishWindow) is the JetStream context's and spans every call,
// so concurrent calls share it and one call's wait never holds back
// another call's sends (no lock is held while waiting).
//
// Per-message work is kept to what the wire needs: the topic's names and
// its stream's existence are looked up without a lock, the acks reach
// their batch through the context's ack and error handlers (pubAcks), not
// through a future's channels, and a publish passes no options (each
// option costs the client library an allocation per message) unless the
// window stays full, see publishAsync.

// defaultStallWait is how long the client library lets a publish without
// options wait for a slot in a full window before it fails with
// ErrTooManyStalledMsgs (its defaultAsyncStallWait).
const defaultStallWait = 200 * time.Millisecond

// publishJS publishes msgs and returns the outcome of each (nil: stored),
// or an error before anything was sent. With report, a message is
// reported as soon as the server stored it, and its outcome is
// errReported.
func (b *Backend) publishJS(ctx context.Context, topic string, msgs []*backend.Message, report func(int, error)) ([]error, error) {
	due := backend.DueTimes(msgs)
	if err := b.checkDue(due); err != nil {
		return nil, err
	}
	tn, err := b.ensureStream(ctx, topic)
	if err != nil {
		return nil, err
	}
	dl, hasDeadline := ctx.Deadline()
	pb := newPubBatch(len(msgs), report)
	var unsent failures
	for i, m := range msgs {
		if err := ctx.Err(); err != nil {
			unsent.add(i, err)
			continue
		}
		nm, err := b.encodeFor(ctx, tn, topic, m, dueAt(due, i))
		if err != nil {
			unsent.add(i, err)
			continue
		}
		b.pubs.add(nm, pb, i)
		if err := b.publishAsync(ctx, nm, dl, hasDeadline); err != nil {
			b.pubs.drop(nm, pb, i)
			unsent.add(i, err)
		}
	}
	errs := pb.wait(ctx)
	if b.awaitAcks(ctx, tn, topic, msgs, due, errs) {
		// The stream vanished (deleted, or lost with memory storage on a
		// restart): look it up again on the next publish.
		b.forgetStream(tn.stream)
	}
	for _, f := range unsent.failed {
		errs[f.Index] = f.Err
	}
	return errs, nil
}

// awaitAcks goes through the answers to the publishes of a batch: a
// message a clustered stream is still storing under its ID is published
// again (publishAgain), and its answer replaced. It reports whether the
// stream did not answer (it may be gone).
func (b *Backend) awaitAcks(ctx context.Context, tn *topicNames, topic string, msgs []*backend.Message, due []int64, errs []error) bool {
	noStream := false
	for i, err := range errs {
		if err == nil || err == errNotSent || err == errReported {
			continue
		}
		if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, natsgo.ErrNoResponders) {
			noStream = true
		}
		if dupInProcess(err) {
			errs[i] = b.publishAgain(ctx, tn, topic, msgs[i], dueAt(due, i))
		}
	}
	return noStream
}

// pubAcks routes the answers to async publishes, which the JetStream
// context hands to its ack and error handlers with the message published,
// to the batch waiting for them. It is safe for concurrent use.
type pubAcks struct {
	mu      sync.Mutex
	waiting map[*natsgo.Msg]pubRef
}

// pubRef is the place of a published message in its batch.
type pubRef struct {
	batch *pubBatch
	i     int
}

// add registers nm as message i of pb, before it is published: its
// answer may come before the publish returns.
func (p *pubAcks) add(nm *natsgo.Msg, pb *pubBatch, i int) {
	pb.mu.Lock()
	pb.errs[i] = errUnanswered
	pb.pending++
	pb.mu.Unlock()
	p.mu.Lock()
	if p.waiting == nil {
		p.waiting = map[*natsgo.Msg]pubRef{}
	}
	p.waiting[nm] = pubRef{pb, i}
	p.mu.Unlock()
}

// drop unregisters nm, message i of pb, whose publish failed: the client
// library gives no answer for it.
func (p *pubAcks) drop(nm *natsgo.Msg, pb *pubBatch, i int) {
	p.mu.Lock()
	delete(p.waiting, nm)
	p.mu.Unlock()
	pb.answer(i, errNotSent)
}

// acked is the JetStream context's ack handler.
func (p *pubAcks) acked(_ jetstream.JetStream, nm *natsgo.Msg, _ *jetstream.PubAck) {
	p.answer(nm, nil)
}

// failed is the JetStream context's error handler.
func (p *pubAcks) failed(_ jetstream.JetStream, nm *natsgo.Msg, err error) {
	if err == nil {
		err = jetstream.ErrInvalidJSAck
	}
	p.answer(nm, err)
}

// answer gives the batch of nm its answer; messages the backend is not
// waiting for (a schedule's promotion, see promote.go) are ignored.
func (p *pubAcks) answer(nm *natsgo.Msg, err error) {
	p.mu.Lock()
	ref, ok := p.waiting[nm]
	if ok {
		delete(p.waiting, nm)
	}
	p.mu.Unlock()
	if ok {
		ref.batch.answer(ref.i, err)
	}
}

// Sentinels of pubBatch.errs: a message whose answer is awaited, one
// that was not published (its failure is counted already), and one
// stored and reported at once.
var (
	errUnanswered = errors.New("no answer yet")
	errNotSent    = errors.New("not sent")
	errReported   = errors.New("stored and reported")
)

// pubBatch is one Publish call's wait for the answers to its messages.
type pubBatch struct {
	mu sync.Mutex
	// errs holds each message's answer: nil when stored (errReported once
	// reported), errNotSent when not published, errUnanswered while
	// waiting.
	errs []error
	// pending counts the answers still awaited, plus one while the batch
	// is being published.
	pending int
	done    chan struct{} // closed when pending reaches 0
	ended   bool          // the caller stopped waiting: answers are dropped
	// report, when set, is given each stored message at once; reporting
	// counts the calls in progress, which wait lets return.
	report    func(int, error)
	reporting sync.WaitGroup
}

func newPubBatch(n int, report func(int, error)) *pubBatch {
	pb := &pubBatch{errs: make([]error, n), pending: 1, done: make(chan struct{}), report: report}
	for i := range pb.errs {
		pb.errs[i] = errNotSent
	}
	return pb
}

// answer records message i's answer; with report, a stored message is
// reported now, outside the lock.
func (pb *pubBatch) answer(i int, err error) {
	pb.mu.Lock()
	if pb.ended || pb.errs[i] != errUnanswered {
		pb.mu.Unlock()
		return
	}
	now := err == nil && pb.report != nil
	if now {
		err = errReported
		pb.reporting.Add(1)
	}
	pb.errs[i] = err
	pb.settle()
	pb.mu.Unlock()
	if now {
		pb.report(i, nil)
		pb.reporting.Done()
	}
}

// settle counts one answer, or the end of publishing. pb.mu is held.
func (pb *pubBatch) settle() {
	if pb.pending--; pb.pending == 0 {
		close(pb.done)
	}
}

// wait ends publishing and waits for every answer, or until ctx ends;
// each message not answered then fails with ctx's error. It returns the
// answers, which change no more.
func (pb *pubBatch) wait(ctx context.Context) []error {
	pb.mu.Lock()
	pb.settle()
	pb.mu.Unlock()
	select {
	case <-pb.done:
	case <-ctx.Done():
	}
	pb.mu.Lock()
	pb.ended = true
	for i, err := range pb.errs {
		if err == errUnanswered {
			pb.errs[i] = ctx.Err()
		}
	}
	pb.mu.Unlock()
	pb.reporting.Wait()
	return pb.errs
}

// encodeFor builds the NATS message of m: a schedule when it is due
// later (due > 0, Unix ms) and the stream takes schedules, else the
// message on the topic's subject.
func (b *Backend) encodeFor(ctx context.Context, tn *topicNames, topic string, m *backend.Message, due int64) (*natsgo.Msg, error) {
	if due > 0 && b.schedulesReady(ctx, tn, topic) {
		return b.encodeScheduled(tn, topic, m)
	}
	return encode(tn.subject, m, false, tn.idScope)
}

// checkDue refuses, before any I/O, a batch with a message due further
// ahead than MaxAge: the stream would drop its schedule before it is due.
func (b *Backend) checkDue(due []int64) error {
	if due == nil || b.opts.MaxAge <= 0 {
		return nil
	}
	limit := time.Now().Add(b.opts.MaxAge).UnixMilli()
	for i, ms := range due {
		if ms > limit {
			return fmt.Errorf("%w: message %d: DeliverAt %s is more than the streams' max age (%v) ahead: the stream would drop it before it is due",
				backend.ErrInvalidMessage, i, time.UnixMilli(ms).UTC().Format(time.RFC3339Nano), b.opts.MaxAge)
		}
	}
	return nil
}

// dueAt is due[i], or 0 when due is nil.
func dueAt(due []int64, i int) int64 {
	if due == nil {
		return 0
	}
	return due[i]
}

// errDupInProcess is the error code of a clustered stream that is still
// storing an earlier publish with the same Nats-Msg-Id.
const errDupInProcess jetstream.ErrorCode = 10158

func dupInProcess(err error) bool {
	var je jetstream.JetStreamError
	return errors.As(err, &je) && je.APIError() != nil && je.APIError().ErrorCode == errDupInProcess
}

// publishAgain publishes m once more, and waits for the answer, after a
// clustered stream answered that it was storing an earlier publish of the
// same ID: that one may yet fail, so m counts as stored only when the
// stream says it has it (a duplicate ack) or stores it now.
func (b *Backend) publishAgain(ctx context.Context, tn *topicNames, topic string, m *backend.Message, due int64) error {
	pause := time.Millisecond
	for {
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		nm, err := b.encodeFor(ctx, tn, topic, m, due)
		if err != nil {
			return err
		}
		pctx, cancel := context.WithTimeout(ctx, b.opts.PublishTimeout)
		_, err = b.js.PublishMsg(pctx, nm)
		cancel()
		if !dupInProcess(err) {
			return err
		}
		pause = min(2*pause, 100*time.Millisecond)
	}
}

// publishAsync sends nm within the publish window; its answer comes to
// b.pubs. While the window has room this passes no options. When the
// window stays full, the publish waits for a slot until ctx's deadline
// (measured now: the stream lookup and earlier messages took their share)
// or, without a deadline, for PublishTimeout.
func (b *Backend) publishAsync(ctx context.Context, nm *natsgo.Msg, dl time.Time, hasDeadline bool) error {
	if !hasDeadline || time.Until(dl) > defaultStallWait {
		// The library's own wait for a slot ends before the deadline.
		_, err := b.js.PublishMsgAsync(nm)
		if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	wait := b.opts.PublishTimeout - defaultStallWait
	if hasDeadline {
		wait = time.Until(dl)
	}
	_, err := b.js.PublishMsgAsync(nm, jetstream.WithStallWait(max(wait, time.Millisecond)))
	return err
}

func (b *Backend) publishCore(ctx context.Context, topic string, msgs []*backend.Message) error {
	subject := b.namesFor(topic).subject
	fs := failures{n: len(msgs)}
	sent := 0
	for i, m := range msgs {
		nm, err := encode(subject, m, true, "")
		if err != nil {
			fs.add(i, err)
			continue
		}
		if err := b.nc.PublishMsg(nm); err != nil {
			fs.add(i, err)
			continue
		}
		sent++
	}
	if sent > 0 {
		fctx := ctx
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			fctx, cancel = context.WithTimeout(ctx, b.opts.PublishTimeout)
			defer cancel()
		}
		if err := b.nc.FlushWithContext(fctx); err != nil {
			return fmt.Errorf("flush: %w", err)
		}
	}
	return fs.result()
}
