package bus_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
)

// gateBackend records every Publish batch and holds each call until the
// test releases it, so tests control which calls are in flight.
type gateBackend struct {
	nopBackend
	calls   chan *gateCall
	failIDs map[string]error // messages the backend fails, by ID
}

type gateCall struct {
	ctx     context.Context
	ids     []string
	bodies  []string
	release chan struct{}
}

func newGateBackend() *gateBackend {
	return &gateBackend{calls: make(chan *gateCall, 100), failIDs: map[string]error{}}
}

func (g *gateBackend) Publish(ctx context.Context, _ string, msgs []*bus.BackendMessage) error {
	c := &gateCall{ctx: ctx, release: make(chan struct{})}
	for _, m := range msgs {
		c.ids = append(c.ids, m.ID)
		c.bodies = append(c.bodies, string(m.Payload))
	}
	g.calls <- c
	select {
	case <-c.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	var failed []bus.Failure
	for i, m := range msgs {
		if err := g.failIDs[m.ID]; err != nil {
			failed = append(failed, bus.Failure{Index: i, Err: err})
		}
	}
	if failed != nil {
		return &backend.BatchError{Failed: failed}
	}
	return nil
}

// next waits for the next backend call.
func (g *gateBackend) next(t *testing.T) *gateCall {
	t.Helper()
	return within(t, g.calls, "backend Publish call")
}

// noCall checks that no backend call is waiting.
func (g *gateBackend) noCall(t *testing.T) {
	t.Helper()
	select {
	case c := <-g.calls:
		t.Fatalf("unexpected backend call with %v", c.ids)
	default:
	}
}

func bmsg(id string) *bus.Message { return &bus.Message{ID: id, Payload: []byte("body-" + id)} }

type ctxKey struct{}

// publishAsync publishes in a goroutine and returns the channel of its
// result.
func publishAsync(ctx context.Context, b *bus.Bus, msgs ...*bus.Message) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- b.Publish(ctx, "t", msgs...) }()
	return ch
}

func result(t *testing.T, ch <-chan error) error {
	t.Helper()
	return within(t, ch, "return of Publish")
}

// waitQueued waits until n calls wait behind the batches in flight, as
// the bus's pending count shows.
func waitQueued(t *testing.T, b *bus.Bus, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return bus.PendingPublishes(b, "t") == n },
		10*time.Second, time.Millisecond, "want %d publishes queued", n)
}

// busyBus returns a bus with one batch slot per topic, and that slot on
// topic "t" taken by a call the backend holds, so later calls queue;
// release lets the held call finish and checks its result.
func busyBus(t *testing.T, pb bus.PublishBatching) (g *gateBackend, b *bus.Bus, release func()) {
	t.Helper()
	g = newGateBackend()
	pb.MaxBatches = 1
	b = bus.New(g, bus.WithPublishBatching(pb))
	t.Cleanup(func() { _ = b.Close(context.Background()) })
	first := publishAsync(context.Background(), b, bmsg("first"))
	held := g.next(t)
	return g, b, func() {
		t.Helper()
		close(held.release)
		require.NoError(t, result(t, first), "the held call succeeds")
	}
}

func TestPublishAloneGoesStraightToTheBackendWithTheCallersCtx(t *testing.T) {
	g := newGateBackend()
	b := bus.New(g, bus.WithPublishBatching(bus.PublishBatching{MaxBatches: 1}))
	defer b.Close(context.Background())

	ctx := context.WithValue(context.Background(), ctxKey{}, "caller")
	done := publishAsync(ctx, b, bmsg("a"), bmsg("b"))
	c := g.next(t)
	assert.Equal(t, []string{"a", "b"}, c.ids, "one call is one backend batch")
	assert.Equal(t, "caller", c.ctx.Value(ctxKey{}), "the backend gets the caller's own ctx")
	close(c.release)
	require.NoError(t, result(t, done))
}

func TestConcurrentPublishesAreCombinedWhileTheTopicIsBusy(t *testing.T) {
	g, b, release := busyBus(t, bus.PublishBatching{})
	var waiting []<-chan error
	for i := range 10 {
		waiting = append(waiting, publishAsync(context.Background(), b, bmsg(fmt.Sprint("m", i))))
	}
	waitQueued(t, b, 10)
	g.noCall(t)
	release()

	c2 := g.next(t)
	assert.Len(t, c2.ids, 10, "the ten waiting calls go out as one backend batch")
	for i, id := range c2.ids {
		assert.Equal(t, "body-"+id, c2.bodies[i], "each message keeps its own payload")
	}
	close(c2.release)
	for _, ch := range waiting {
		require.NoError(t, result(t, ch))
	}
}

func TestCombinedBatchesRespectMessageAndByteBounds(t *testing.T) {
	g, b, release := busyBus(t, bus.PublishBatching{MaxMessages: 5, MaxBytes: 1 << 20})
	var waiting []<-chan error
	for i := range 4 {
		waiting = append(waiting, publishAsync(context.Background(), b, bmsg(fmt.Sprint(i, "a")), bmsg(fmt.Sprint(i, "b"))))
		waitQueued(t, b, i+1)
	}
	release()
	for range 2 {
		c := g.next(t)
		assert.Len(t, c.ids, 4, "two calls of two messages fit in five; a third would not")
		for i := 0; i < len(c.ids); i += 2 {
			assert.Equal(t, c.ids[i][:1], c.ids[i+1][:1], "one call's messages are never split")
		}
		close(c.release)
	}
	for _, ch := range waiting {
		require.NoError(t, result(t, ch))
	}

	// A call larger than the bound goes alone.
	big := make([]*bus.Message, 8)
	for i := range big {
		big[i] = bmsg(fmt.Sprint("big", i))
	}
	done := publishAsync(context.Background(), b, big...)
	c := g.next(t)
	assert.Len(t, c.ids, 8, "a call over MaxMessages is sent whole")
	close(c.release)
	require.NoError(t, result(t, done))
}

func TestCombinedBatchReportsEachFailureToItsOwnCaller(t *testing.T) {
	g, b, release := busyBus(t, bus.PublishBatching{})
	g.failIDs["bad2"] = errors.New("refused by the backend")
	g.failIDs["bad3"] = errors.New("refused by the backend")
	ok1 := publishAsync(context.Background(), b, bmsg("ok1"), bmsg("ok2"))
	waitQueued(t, b, 1)
	partial := publishAsync(context.Background(), b, bmsg("ok3"), bmsg("bad2"))
	waitQueued(t, b, 2)
	single := publishAsync(context.Background(), b, bmsg("bad3"))
	waitQueued(t, b, 3)
	invalid := publishAsync(context.Background(), b, &bus.Message{ID: "bad id with spaces"})
	release()
	c2 := g.next(t)
	assert.Equal(t, []string{"ok1", "ok2", "ok3", "bad2", "bad3"}, c2.ids, "valid calls are combined in arrival order; the invalid one never reaches the backend")
	close(c2.release)

	require.NoError(t, result(t, ok1), "a call whose messages all succeeded gets nil")
	err := result(t, partial)
	var pe *bus.PublishError
	require.ErrorAs(t, err, &pe, "a call with one failed message of two gets a PublishError")
	require.Len(t, pe.Failed, 1)
	assert.Equal(t, 1, pe.Failed[0].Index, "the index is within the caller's own call")
	assert.Equal(t, "bad2", pe.Failed[0].ID)
	err = result(t, single)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "refused by the backend", "a one-message call gets its message's error")
	require.ErrorIs(t, result(t, invalid), bus.ErrInvalidMessage, "validation is per call, before anything is combined")
}

func TestQueuedPublishWhoseCtxEndsIsNeverSent(t *testing.T) {
	g, b, release := busyBus(t, bus.PublishBatching{})
	ctx, cancel := context.WithCancel(context.Background())
	gone := publishAsync(ctx, b, bmsg("gone"))
	waitQueued(t, b, 1)
	kept := publishAsync(context.Background(), b, bmsg("kept"))
	waitQueued(t, b, 2)
	cancel()
	require.ErrorIs(t, result(t, gone), context.Canceled, "a queued call returns when its ctx ends")
	waitQueued(t, b, 1)
	release()
	c2 := g.next(t)
	assert.Equal(t, []string{"kept"}, c2.ids, "the abandoned call's message is not sent")
	close(c2.release)
	require.NoError(t, result(t, kept))
}

func TestCombinedBatchOwnsItsBytesAndEndsOnlyWhenEveryCallerGaveUp(t *testing.T) {
	g, b, release := busyBus(t, bus.PublishBatching{})
	ctxA, cancelA := context.WithCancel(context.Background())
	ctxB, cancelB := context.WithCancel(context.Background())
	defer cancelB()
	payload := []byte("original")
	headers := map[string]string{"k": "v"}
	a := publishAsync(ctxA, b, &bus.Message{ID: "a", Payload: payload, Headers: headers})
	waitQueued(t, b, 1)
	bb := publishAsync(ctxB, b, bmsg("b"))
	waitQueued(t, b, 2)
	release()
	c2 := g.next(t) // a and b are in flight together

	cancelA()
	err := result(t, a)
	require.ErrorIs(t, err, context.Canceled, "a caller whose ctx ends returns at once")
	copy(payload, "CHANGED!") // the caller may reuse its buffers now
	headers["k"] = "changed"
	assert.Equal(t, "body-b", c2.bodies[1])
	assert.Equal(t, "original", c2.bodies[0], "the batch sent the bytes the call had when it was made")
	select {
	case <-c2.ctx.Done():
		t.Fatal("the batch ctx ended while another caller still waits")
	default:
	}
	cancelB()
	select {
	case <-c2.ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the batch ctx did not end when every caller gave up")
	}
	require.ErrorIs(t, result(t, bb), context.Canceled)
}

func TestCombinedBatchCarriesTheLatestDeadline(t *testing.T) {
	g, b, release := busyBus(t, bus.PublishBatching{})
	near := time.Now().Add(time.Hour)
	far := near.Add(time.Hour)
	ctx1, cancel1 := context.WithDeadline(context.Background(), near)
	defer cancel1()
	ctx2, cancel2 := context.WithDeadline(context.Background(), far)
	defer cancel2()
	r1 := publishAsync(ctx1, b, bmsg("1"))
	waitQueued(t, b, 1)
	r2 := publishAsync(ctx2, b, bmsg("2"))
	waitQueued(t, b, 2)
	release()
	c2 := g.next(t)
	dl, ok := c2.ctx.Deadline()
	require.True(t, ok, "a batch of calls that all have deadlines has one")
	assert.True(t, dl.Equal(far), "the batch deadline is the latest caller's, got %v want %v", dl, far)
	close(c2.release)
	require.NoError(t, result(t, r1))
	require.NoError(t, result(t, r2))
}

func TestDisabledBatchingSendsEveryCallAtOnce(t *testing.T) {
	g := newGateBackend()
	b := bus.New(g, bus.WithPublishBatching(bus.PublishBatching{Disabled: true}))
	defer b.Close(context.Background())

	var results []<-chan error
	var calls []*gateCall
	for i := range 5 {
		results = append(results, publishAsync(context.Background(), b, bmsg(fmt.Sprint(i))))
		calls = append(calls, g.next(t))
	}
	for _, c := range calls {
		assert.Len(t, c.ids, 1, "nothing is combined")
		close(c.release)
	}
	for _, r := range results {
		require.NoError(t, result(t, r))
	}
}

func TestPublishBatchingRejectsNegativeBounds(t *testing.T) {
	b := bus.New(newGateBackend(), bus.WithPublishBatching(bus.PublishBatching{MaxBatches: -1}))
	err := b.Publish(context.Background(), "t", bmsg("a"))
	require.ErrorIs(t, err, bus.ErrInvalidOption)
}

func TestCloseWaitsForCombinedBatches(t *testing.T) {
	g, b, release := busyBus(t, bus.PublishBatching{})
	queued := publishAsync(context.Background(), b, bmsg("q"))
	waitQueued(t, b, 1)
	closed := make(chan error, 1)
	go func() { closed <- b.Close(context.Background()) }()
	release()
	c2 := g.next(t)
	assert.Equal(t, []string{"q"}, c2.ids, "a call queued before Close is still sent")
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while a combined batch was in flight", err)
	default:
	}
	close(c2.release)
	require.NoError(t, result(t, queued))
	require.NoError(t, result(t, closed))
}

func TestPublishBatchingForgetsIdleTopicsBeyondAFew(t *testing.T) {
	b := bus.New(nopBackend{})
	defer b.Close(context.Background())
	for i := range 500 {
		require.NoError(t, b.Publish(context.Background(), fmt.Sprint("topic", i), bmsg("a")))
	}
	assert.LessOrEqual(t, bus.PublishTopicsKept(b), 65, "state of idle topics stays bounded")
	assert.Positive(t, bus.PublishTopicsKept(b), "a few idle topics keep their state for reuse")
}
