package conformance

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	bus "github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
)

// asyncBatching keeps several small PublishAsync batches of a topic in
// flight at once, so the cases see batches overtake each other where a
// backend lets them.
var asyncBatching = bus.PublishBatching{MaxMessages: 8, MaxBatches: 4, Window: 64}

// testPublishAsyncKeyOrder: messages published one at a time with
// PublishAsync, several batches in flight, are handled in each key's call
// order, every result nil once Flush returned.
func testPublishAsyncKeyOrder(t *testing.T, s *suite) {
	h := s.newHarness(t, bus.WithPublishBatching(asyncBatching))
	topic, group := h.topic("asyncorder"), h.group("asyncorder")
	msgs := keyed(8, count(40, 10))
	log := newKeyLog()
	h.subscribe(context.Background(), topic, func(ctx context.Context, d *bus.Delivery) error {
		log.start(d)
		log.end(d, true)
		return nil
	}, bus.WithGroup(group), bus.WithKeyOrdering(), bus.WithMaxInFlight(16), bus.WithAckTimeout(s.longLease()))

	ctx, cancel := context.WithTimeout(context.Background(), s.deadline())
	defer cancel()
	results := make([]*bus.PublishResult, len(msgs))
	for i, m := range msgs {
		results[i] = h.bus.PublishAsync(ctx, topic, m)
	}
	require.NoError(t, h.bus.Flush(ctx), "Flush waits for every result")
	for i, r := range results {
		select {
		case <-r.Done():
		default:
			t.Fatalf("result %d is not known after Flush", i)
		}
		require.NoError(t, r.Get(ctx), "message %d (%s)", i, msgs[i].Payload)
	}
	s.eventually(t, func() bool { return log.total.Load() >= int64(len(msgs)) }, "every message handled")
	log.assertInOrder(t, msgs)
}

// failOnPayload is a backend whose Publish fails a whole batch that holds
// a message with a payload in fail, before storing anything of it.
type failOnPayload struct {
	backend.Backend
	fail map[string]bool
}

func (f *failOnPayload) Publish(ctx context.Context, topic string, msgs []*backend.Message) error {
	for _, m := range msgs {
		if f.fail[string(m.Payload)] {
			return errInjected
		}
	}
	return f.Backend.Publish(ctx, topic, msgs)
}

// testPublishAsyncFailurePausesKey: a failed PublishAsync message pauses
// its key: nothing of the key published after it is stored until
// ResumePublish, and the key is then stored in order again; bad input
// fails before any I/O; after Close, PublishAsync fails with ErrClosed.
func testPublishAsyncFailurePausesKey(t *testing.T, s *suite) {
	fb := &failOnPayload{Backend: s.newBackend(t), fail: map[string]bool{"a/3": true}}
	events := &eventLog{}
	b := bus.New(fb, bus.WithObserver(events), bus.WithPublishBatching(asyncBatching))
	h := &harness{t: t, s: s, be: &countingBackend{Backend: fb}, bus: b, events: events}
	closed := false
	t.Cleanup(func() {
		if !closed {
			ctx, cancel := context.WithTimeout(context.Background(), s.cfg.dur(closeTimeout))
			defer cancel()
			_ = b.Close(ctx)
		}
	})
	topic, group := h.topic("asyncfail"), h.group("asyncfail")
	in := &inbox{}
	h.subscribe(context.Background(), topic, in.handle(nil), bus.WithGroup(group), bus.WithKeyOrdering(), bus.WithAckTimeout(s.longLease()))

	ctx, cancel := context.WithTimeout(context.Background(), s.deadline())
	defer cancel()
	bad := b.PublishAsync(ctx, topic, &bus.Message{Key: "a", Headers: map[string]string{"bad key": "v"}})
	select {
	case <-bad.Done():
	default:
		t.Fatal("the result of an invalid message is known when PublishAsync returns")
	}
	require.ErrorIs(t, bad.Get(ctx), bus.ErrInvalidMessage)

	const n = 8
	ra := make([]*bus.PublishResult, n)
	rb := make([]*bus.PublishResult, n)
	for i := range n {
		ra[i] = b.PublishAsync(ctx, topic, &bus.Message{Key: "a", Payload: fmt.Appendf(nil, "a/%d", i)})
		rb[i] = b.PublishAsync(ctx, topic, &bus.Message{Key: "b", Payload: fmt.Appendf(nil, "b/%d", i)})
	}
	require.NoError(t, b.Flush(ctx))
	// a/3's batch fails as a whole; a's stored messages are those before
	// the first failed one.
	stored := 0
	for stored < n && ra[stored].Get(ctx) == nil {
		stored++
	}
	require.LessOrEqual(t, stored, 3, "a/3 is not stored")
	for i := stored; i < n; i++ {
		err := ra[i].Get(ctx)
		if !errors.Is(err, errInjected) {
			require.ErrorIs(t, err, bus.ErrPublishPaused, "a/%d follows a failed message of a", i)
		}
	}
	require.ErrorIs(t, b.PublishAsync(ctx, topic, &bus.Message{Key: "a", Payload: []byte("a/late")}).Get(ctx), bus.ErrPublishPaused,
		"a stays paused until resumed")

	delete(fb.fail, "a/3")
	b.ResumePublish(topic, "a")
	for i := stored; i < n; i++ {
		ra[i] = b.PublishAsync(ctx, topic, &bus.Message{Key: "a", Payload: fmt.Appendf(nil, "a/%d", i)})
	}
	for i := range n {
		require.NoError(t, ra[i].Get(ctx), "a/%d after ResumePublish", i)
		if err := rb[i].Get(ctx); err != nil {
			// A b message in a/3's batch failed and paused b.
			require.True(t, errors.Is(err, errInjected) || errors.Is(err, bus.ErrPublishPaused), "b/%d: %v", i, err)
		}
	}
	var wantB []string
	for i, r := range rb {
		if r.Get(ctx) == nil {
			wantB = append(wantB, fmt.Sprintf("b/%d", i))
		}
	}
	s.eventually(t, func() bool { return in.distinct() >= n+len(wantB) }, "every stored message handled")
	order := map[string][]string{}
	for _, r := range in.all() {
		if r.Attempt == 1 {
			order[r.Key] = append(order[r.Key], string(r.Payload))
		}
	}
	var wantA []string
	for i := range n {
		wantA = append(wantA, fmt.Sprintf("a/%d", i))
	}
	assert.Equal(t, wantA, order["a"], "a is stored in order: the failed messages were republished before newer ones")
	assert.Equal(t, wantB, order["b"], "b's stored messages are in call order")

	// Close waits for the results still outstanding.
	pending := make([]*bus.PublishResult, 32)
	for i := range pending {
		pending[i] = b.PublishAsync(ctx, topic, &bus.Message{Key: "c", Payload: fmt.Appendf(nil, "c/%d", i)})
	}
	closeCtx, cancelClose := context.WithTimeout(context.Background(), s.cfg.dur(closeTimeout))
	defer cancelClose()
	closed = true
	require.NoError(t, b.Close(closeCtx), "close")
	for i, r := range pending {
		select {
		case <-r.Done():
		default:
			t.Fatalf("result %d is not known after Close returned", i)
		}
		require.NoError(t, r.Get(ctx), "c/%d, published before Close", i)
	}
	require.ErrorIs(t, b.PublishAsync(ctx, topic, &bus.Message{}).Get(ctx), bus.ErrClosed, "PublishAsync after Close")
}
