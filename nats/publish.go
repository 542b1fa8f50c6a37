package nats

import (
	"context"
	"errors"
	"fmt"
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
		err = b.publishJS(ctx, topic, msgs)
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
// its stream's existence are looked up without a lock, futures of small
// batches live on the stack, and a publish passes no options (each option
// costs the client library an allocation per message) unless the window
// stays full, see publishAsync.

// smallBatch is the batch size whose futures need no allocation.
const smallBatch = 16

// defaultStallWait is how long the client library lets a publish without
// options wait for a slot in a full window before it fails with
// ErrTooManyStalledMsgs (its defaultAsyncStallWait).
const defaultStallWait = 200 * time.Millisecond

func (b *Backend) publishJS(ctx context.Context, topic string, msgs []*backend.Message) error {
	due := backend.DueTimes(msgs)
	if err := b.checkDue(due); err != nil {
		return err
	}
	tn, err := b.ensureStream(ctx, topic)
	if err != nil {
		return err
	}
	dl, hasDeadline := ctx.Deadline()
	var buf [smallBatch]jetstream.PubAckFuture
	futures := buf[:0]
	if len(msgs) > len(buf) {
		futures = make([]jetstream.PubAckFuture, 0, len(msgs))
	}
	futures = futures[:len(msgs)]
	fs := failures{n: len(msgs)}
	for i, m := range msgs {
		if err := ctx.Err(); err != nil {
			fs.add(i, err)
			continue
		}
		nm, err := b.encodeFor(ctx, tn, topic, m, dueAt(due, i))
		if err != nil {
			fs.add(i, err)
			continue
		}
		f, err := b.publishAsync(ctx, nm, dl, hasDeadline)
		if err != nil {
			fs.add(i, err)
			continue
		}
		futures[i] = f
	}
	noStream := b.awaitAcks(ctx, tn, topic, msgs, due, futures, &fs)
	clear(futures)
	if noStream {
		// The stream vanished (deleted, or lost with memory storage on a
		// restart): look it up again on the next publish.
		b.forgetStream(tn.stream)
	}
	sortFailures(fs.failed)
	return fs.result()
}

// awaitAcks waits for the server's answer to each publish in futures and
// adds the failures to fs; a message a clustered stream is still storing
// under its ID is published again (publishAgain). It reports whether the
// stream did not answer (it may be gone).
func (b *Backend) awaitAcks(ctx context.Context, tn *topicNames, topic string, msgs []*backend.Message, due []int64, futures []jetstream.PubAckFuture, fs *failures) bool {
	noStream := false
	done := ctx.Done()
	for i, f := range futures {
		if f == nil {
			continue
		}
		select {
		case <-f.Ok():
		case err := <-f.Err():
			if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, natsgo.ErrNoResponders) {
				noStream = true
			}
			if dupInProcess(err) {
				if err = b.publishAgain(ctx, tn, topic, msgs[i], dueAt(due, i)); err == nil {
					continue
				}
			}
			fs.add(i, err)
		case <-done:
			fs.add(i, ctx.Err())
		}
	}
	return noStream
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

// publishAsync sends nm within the publish window. While the window has
// room this passes no options. When the window stays full, the publish
// waits for a slot until ctx's deadline (measured now: the stream lookup
// and earlier messages took their share) or, without a deadline, for
// PublishTimeout.
func (b *Backend) publishAsync(ctx context.Context, nm *natsgo.Msg, dl time.Time, hasDeadline bool) (jetstream.PubAckFuture, error) {
	if !hasDeadline || time.Until(dl) > defaultStallWait {
		// The library's own wait for a slot ends before the deadline.
		f, err := b.js.PublishMsgAsync(nm)
		if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
			return f, err
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	wait := b.opts.PublishTimeout - defaultStallWait
	if hasDeadline {
		wait = time.Until(dl)
	}
	return b.js.PublishMsgAsync(nm, jetstream.WithStallWait(max(wait, time.Millisecond)))
}

func sortFailures(f []backend.Failure) {
	// Failures are added in two passes, each in index order; merge them.
	for i := 1; i < len(f); i++ {
		for j := i; j > 0 && f[j].Index < f[j-1].Index; j-- {
			f[j], f[j-1] = f[j-1], f[j]
		}
	}
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
