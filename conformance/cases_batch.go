package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	bus "github.com/eventbus-go/bus"
)

// batchLog records the batches a batch handler sees. Safe for
// concurrent use.
type batchLog struct {
	mu      sync.Mutex
	sizes   []int
	in      inbox
	running int
	most    int // most batches running at once
}

func (l *batchLog) start(ds []*bus.Delivery) {
	l.mu.Lock()
	l.sizes = append(l.sizes, len(ds))
	l.running++
	l.most = max(l.most, l.running)
	l.mu.Unlock()
	for _, d := range ds {
		l.in.record(d)
	}
}

func (l *batchLog) end() {
	l.mu.Lock()
	l.running--
	l.mu.Unlock()
}

func (l *batchLog) batchSizes() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]int(nil), l.sizes...)
}

// testBatchSettlesEachMessage: a batch handler acks one delivery, nacks
// one, rejects one and returns an error for the fourth: the acked one is
// never handled again, the nacked one and the one the error settled come
// back with Attempt 2, the rejected one goes to the dead-letter topic;
// no batch exceeds its max.
func testBatchSettlesEachMessage(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic, group := h.topic("batchsettle"), h.group("batchsettle")
	dlq := h.deadLetterReader(topic + ".dlq")
	var log batchLog
	errBatch := errors.New("conformance: batch failure")
	settleErrs := make(chan error, 8)
	sub, err := h.bus.SubscribeBatch(context.Background(), topic, func(ctx context.Context, ds []*bus.Delivery) error {
		log.start(ds)
		defer log.end()
		failed := false
		for _, d := range ds {
			if d.Attempt > 1 {
				// A retry is acked here: it may share its batch with the
				// first delivery of "rest", whose batch returns an error.
				if err := d.Ack(ctx); err != nil {
					t.Errorf("ack the retry %q: %v", d.Payload, err)
				}
				continue
			}
			switch string(d.Payload) {
			case "ack":
				trySend(settleErrs, d.Ack(ctx))
			case "nack":
				trySend(settleErrs, d.Nack(ctx, 0))
			case "reject":
				trySend(settleErrs, d.Reject(ctx, errors.New("rejected in a batch")))
			case "rest":
				failed = true
			}
		}
		if failed {
			return errBatch
		}
		return nil
	}, bus.WithGroup(group), bus.WithBatch(4, s.cfg.dur(200*time.Millisecond)), bus.WithAckTimeout(s.longLease()), fastRetry())
	require.NoError(t, err, "SubscribeBatch")
	defer h.closeSub(sub)

	msgs := []*bus.Message{{Payload: []byte("ack")}, {Payload: []byte("nack")}, {Payload: []byte("reject")}, {Payload: []byte("rest")}}
	h.publish(topic, msgs...)
	for range 3 {
		require.NoError(t, recv(t, s, settleErrs, "a settlement inside the batch"), "a settlement inside a batch succeeds")
	}
	s.eventually(t, func() bool {
		return len(log.in.of(msgs[1].ID)) >= 2 && len(log.in.of(msgs[3].ID)) >= 2 && dlq.len() >= 1
	}, "the nacked and the failed message come back, the rejected one is dead-lettered")
	s.never(t, s.quiet(), func() bool { return len(log.in.of(msgs[0].ID)) > 1 || len(log.in.of(msgs[2].ID)) > 1 },
		"an acked or rejected message is not handled again")
	assert.Equal(t, []int{1, 2}, log.in.attempts(msgs[1].ID), "the nacked message comes back once, with Attempt 2")
	assert.Equal(t, []int{1, 2}, log.in.attempts(msgs[3].ID), "the batch's error retries the message it left unsettled")
	assert.Equal(t, msgs[2].ID, dlq.all()[0].Headers[bus.HeaderDeadLetterID], "the rejected message is the dead letter")
	assert.Equal(t, bus.OutcomeAcked, log.in.of(msgs[0].ID)[0].Delivery.Outcome())
	assert.Equal(t, bus.OutcomeDeadLettered, log.in.of(msgs[2].ID)[0].Delivery.Outcome())
	for _, n := range log.batchSizes() {
		assert.LessOrEqual(t, n, 4, "no batch exceeds its max")
	}
}

// testBatchBounds: with a max of 5 and a long wait, 20 messages come in
// batches of exactly 5; with a max of 100 and a short wait, 3 messages
// come in batches of at most 3, handed over by the wait bound.
func testBatchBounds(t *testing.T, s *suite) {
	h := s.newHarness(t)
	full, group := h.topic("batchfull"), h.group("batchfull")
	var fullLog batchLog
	sub, err := h.bus.SubscribeBatch(context.Background(), full, func(ctx context.Context, ds []*bus.Delivery) error {
		fullLog.start(ds)
		fullLog.end()
		return nil
	}, bus.WithGroup(group), bus.WithBatch(5, s.deadline()))
	require.NoError(t, err, "SubscribeBatch")
	h.publishN(full, "full", 20)
	s.eventually(t, func() bool { return fullLog.in.len() >= 20 }, "the 20 messages are handled")
	assert.Equal(t, []int{5, 5, 5, 5}, fullLog.batchSizes(), "a batch is handed over when it holds max deliveries")
	h.closeSub(sub)

	short := h.topic("batchwait")
	var waitLog batchLog
	sub, err = h.bus.SubscribeBatch(context.Background(), short, func(ctx context.Context, ds []*bus.Delivery) error {
		waitLog.start(ds)
		waitLog.end()
		return nil
	}, bus.WithGroup(group), bus.WithBatch(100, s.cfg.dur(50*time.Millisecond)))
	require.NoError(t, err, "SubscribeBatch")
	defer h.closeSub(sub)
	h.publishN(short, "wait", 3)
	s.eventually(t, func() bool { return waitLog.in.len() >= 3 }, "the wait bound hands over a batch that is not full")
	for _, n := range waitLog.batchSizes() {
		assert.LessOrEqual(t, n, 3)
	}
}

// testBatchKeyOrder: with WithKeyOrdering, 5 keys of 20 messages each are
// handled in publish order per key, and no batch holds two messages of
// one key.
func testBatchKeyOrder(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic, group := h.topic("batchkeys"), h.group("batchkeys")
	const keys, per = 5, 20
	var log batchLog
	var mu sync.Mutex
	next := map[string]int{}
	var bad []string
	sub, err := h.bus.SubscribeBatch(context.Background(), topic, func(ctx context.Context, ds []*bus.Delivery) error {
		log.start(ds)
		defer log.end()
		seen := map[string]bool{}
		mu.Lock()
		defer mu.Unlock()
		for _, d := range ds {
			if seen[d.Key] {
				bad = append(bad, fmt.Sprintf("a batch holds two messages of key %s", d.Key))
			}
			seen[d.Key] = true
			want := fmt.Sprintf("%s-%d", d.Key, next[d.Key])
			if string(d.Payload) != want {
				bad = append(bad, fmt.Sprintf("key %s: got %s, want %s", d.Key, d.Payload, want))
			}
			next[d.Key]++
		}
		return nil
	}, bus.WithGroup(group), bus.WithKeyOrdering(), bus.WithBatch(8, s.cfg.dur(20*time.Millisecond)), bus.WithAckTimeout(s.longLease()))
	require.NoError(t, err, "SubscribeBatch")
	defer h.closeSub(sub)
	var msgs []*bus.Message
	for i := range per {
		for k := range keys {
			key := fmt.Sprintf("k%d", k)
			msgs = append(msgs, &bus.Message{Key: key, Payload: fmt.Appendf(nil, "%s-%d", key, i)})
		}
	}
	for start := 0; start < len(msgs); start += 25 {
		h.publish(topic, msgs[start:start+25]...)
	}
	s.eventually(t, func() bool { return log.in.len() >= keys*per }, "every message is handled")
	mu.Lock()
	defer mu.Unlock()
	assert.Empty(t, bad, "key order holds inside and across batches")
}

// testBatchLeaseKeptAlive: a batch handler that runs three ack timeouts
// is not redelivered: the leases of its deliveries are kept alive.
func testBatchLeaseKeptAlive(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic, group := h.topic("batchlease"), h.group("batchlease")
	// A lease of twice the suite's short one leaves the keep-alive room
	// on a loaded machine; the handler works three leases.
	lease := 2 * s.ackTimeout()
	var log batchLog
	sub, err := h.bus.SubscribeBatch(context.Background(), topic, func(ctx context.Context, ds []*bus.Delivery) error {
		log.start(ds)
		defer log.end()
		select {
		case <-time.After(3 * lease):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}, bus.WithGroup(group), bus.WithBatch(3, s.cfg.dur(100*time.Millisecond)), bus.WithAckTimeout(lease))
	require.NoError(t, err, "SubscribeBatch")
	defer h.closeSub(sub)
	msgs := h.publishN(topic, "lease", 3)
	s.eventually(t, func() bool { return log.in.len() >= 3 }, "the batch runs")
	s.never(t, 3*lease+s.quiet(), func() bool { return log.in.len() > 3 }, "no delivery of a running batch is redelivered")
	for _, m := range msgs {
		assert.Equal(t, []int{1}, log.in.attempts(m.ID), "handled once")
	}
}

// testBatchCloseReleases: a Close whose ctx ends while a batch handler
// runs cancels the batch's ctx with ErrClosing; its messages come back to
// the group without counting an attempt.
func testBatchCloseReleases(t *testing.T, s *suite) {
	h := s.newHarness(t)
	topic, group := h.topic("batchclose"), h.group("batchclose")
	started := make(chan struct{}, 1)
	causes := make(chan error, 1)
	sub, err := h.bus.SubscribeBatch(context.Background(), topic, func(ctx context.Context, ds []*bus.Delivery) error {
		trySend(started, struct{}{})
		<-ctx.Done()
		trySend(causes, context.Cause(ctx))
		return ctx.Err()
	}, bus.WithGroup(group), bus.WithBatch(3, s.cfg.dur(50*time.Millisecond)), bus.WithAckTimeout(s.longLease()))
	require.NoError(t, err, "SubscribeBatch")
	msgs := h.publishN(topic, "close", 3)
	recv(t, s, started, "the batch to start")
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.dur(200*time.Millisecond))
	defer cancel()
	_ = sub.Close(ctx) // it reports the cancelled handlers, or none once they returned
	require.ErrorIs(t, recv(t, s, causes, "the batch's ctx to end"), bus.ErrClosing, "Close cancels a running batch with ErrClosing")

	in := &inbox{}
	h.subscribe(context.Background(), topic, in.handle(nil), bus.WithGroup(group), bus.WithAckTimeout(s.longLease()))
	s.eventually(t, func() bool { return in.distinct() >= 3 }, "the released messages come back")
	want := []int{1}
	if !h.releases() {
		want = []int{2} // without backend.Releaser a shutdown counts as an attempt
	}
	for _, m := range msgs {
		assert.Equal(t, want, in.attempts(m.ID), "a batch the shutdown cancelled is released like a single delivery")
	}
}
