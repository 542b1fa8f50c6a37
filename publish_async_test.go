package bus_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/middleware"
)

// keyLogBackend stores each message of a batch after a random pause, and
// logs the payloads of each key in the order it stored them. It counts
// batches that held a key while another batch holding it was in flight,
// and how many batches were in flight at once.
type keyLogBackend struct {
	nopBackend
	fail func(m *bus.BackendMessage) error // nil: store everything
	// failAll fails a whole batch that holds a message it names.
	failAll func(m *bus.BackendMessage) error

	mu          sync.Mutex
	log         map[string][]string
	flying      map[string]int
	overlaps    int
	running     int
	maxRunning  int
	calls       int
	headerSeen  map[string]string
	maxBatchLen int
}

func newKeyLogBackend() *keyLogBackend {
	return &keyLogBackend{log: map[string][]string{}, flying: map[string]int{}, headerSeen: map[string]string{}}
}

func (k *keyLogBackend) Publish(ctx context.Context, _ string, msgs []*bus.BackendMessage) error {
	k.mu.Lock()
	k.calls++
	k.running++
	k.maxRunning = max(k.maxRunning, k.running)
	k.maxBatchLen = max(k.maxBatchLen, len(msgs))
	keys := map[string]bool{}
	for _, m := range msgs {
		if m.Key != "" && !keys[m.Key] {
			keys[m.Key] = true
			if k.flying[m.Key] > 0 {
				k.overlaps++
			}
			k.flying[m.Key]++
		}
	}
	k.mu.Unlock()
	t := time.NewTimer(time.Duration(rand.IntN(300)) * time.Microsecond)
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.running--
	for key := range keys {
		k.flying[key]--
	}
	if k.failAll != nil {
		for _, m := range msgs {
			if err := k.failAll(m); err != nil {
				return err
			}
		}
	}
	var failed []bus.Failure
	for i, m := range msgs {
		if k.fail != nil {
			if err := k.fail(m); err != nil {
				failed = append(failed, bus.Failure{Index: i, Err: err})
				continue
			}
		}
		k.log[m.Key] = append(k.log[m.Key], string(m.Payload))
		if v, ok := m.Headers["mw"]; ok {
			k.headerSeen[string(m.Payload)] = v
		}
	}
	if failed != nil {
		return &backend.BatchError{Failed: failed}
	}
	return nil
}

func (k *keyLogBackend) logOf(key string) []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.log[key]...)
}

// flush flushes b within 10 s and fails the test on error.
func flush(t *testing.T, b *bus.Bus) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, b.Flush(ctx), "flush")
}

// get returns r's result, failing the test when it is not known within
// 10 s.
func get(t *testing.T, r *bus.PublishResult) error {
	t.Helper()
	select {
	case <-r.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a PublishAsync result was not known within 10s")
	}
	return r.Get(context.Background())
}

// known reports whether r's result is known.
func known(r *bus.PublishResult) bool {
	select {
	case <-r.Done():
		return true
	default:
		return false
	}
}

// keyed is a message of key with payload "<key>-<i>".
func keyed(key string, i int) *bus.Message {
	return &bus.Message{Key: key, Payload: []byte(key + "-" + strconv.Itoa(i))}
}

func seq(key string, from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, key+"-"+strconv.Itoa(i))
	}
	return out
}

func TestPublishAsyncStoresEachKeyInCallOrder(t *testing.T) {
	be := newKeyLogBackend()
	b := bus.New(be, bus.WithPublishBatching(bus.PublishBatching{MaxMessages: 16, MaxBatches: 10, Window: 320}))
	defer closeBus(t, b)
	const producers, keys, perKey = 4, 6, 150
	var wg sync.WaitGroup
	results := make([][]*bus.PublishResult, producers)
	for p := range producers {
		wg.Go(func() {
			// Each producer owns its keys and interleaves them with
			// messages that have no key.
			for i := range perKey {
				for k := range keys {
					results[p] = append(results[p], b.PublishAsync(context.Background(), "t", keyed(fmt.Sprintf("p%d.k%d", p, k), i)))
				}
				results[p] = append(results[p], b.PublishAsync(context.Background(), "t", &bus.Message{Payload: []byte("free")}))
			}
		})
	}
	wg.Wait()
	flush(t, b)
	for p := range producers {
		for i, r := range results[p] {
			require.True(t, known(r), "after Flush every result is known (producer %d, call %d)", p, i)
			require.NoError(t, get(t, r), "producer %d, call %d", p, i)
		}
		for k := range keys {
			key := fmt.Sprintf("p%d.k%d", p, k)
			require.Equal(t, seq(key, 0, perKey), be.logOf(key), "key %s is stored in call order", key)
		}
	}
	be.mu.Lock()
	defer be.mu.Unlock()
	assert.Zero(t, be.overlaps, "no two batches holding one key are in flight at once")
	assert.Greater(t, be.maxRunning, 1, "batches of different keys were in flight at once")
	assert.LessOrEqual(t, be.maxRunning, 10, "at most MaxBatches batches of the topic in flight, when more than 8")
	assert.Greater(t, be.maxBatchLen, 1, "waiting messages were sent together")
	assert.LessOrEqual(t, be.maxBatchLen, 16, "batches stay within MaxMessages")
	assert.Len(t, be.log[""], producers*perKey, "every message without a key is stored")
}

// PublishAsync keeps up to 8 batches of a topic in flight, more than
// MaxBatches (2 by default), each of at most Window/8 messages: the
// backend holds nearly the whole window, not a quarter of it.
func TestPublishAsyncKeepsEightBatchesInFlight(t *testing.T) {
	g := newGateBackend()
	b := bus.New(g, bus.WithPublishBatching(bus.PublishBatching{Window: 64}))
	defer closeBus(t, b)
	bg := context.Background()
	var rs []*bus.PublishResult
	for i := range 64 {
		rs = append(rs, b.PublishAsync(bg, "t", bmsg("m"+strconv.Itoa(i))))
	}
	var calls []*gateCall
	for range 8 {
		calls = append(calls, g.next(t))
	}
	g.noCall(t)
	close(calls[0].release)
	next := g.next(t)
	assert.Len(t, next.ids, 8, "the messages that waited go as one batch of Window/8")
	g.noCall(t)
	close(next.release)
	for _, c := range calls[1:] {
		close(c.release)
	}
	flushReleasing(t, g, b, 8, rs)
}

// asyncBatchesBackend is a gate backend whose Capabilities ask for 16
// PublishAsync batches of a topic in flight.
type asyncBatchesBackend struct{ *gateBackend }

func (asyncBatchesBackend) Capabilities() bus.Capabilities {
	return bus.Capabilities{Name: "gate16", AsyncBatches: 16}
}

// A backend's Capabilities.AsyncBatches raises the batches of a topic in
// flight above 8, each of at most Window/16 messages.
func TestPublishAsyncKeepsTheBackendsBatchesInFlight(t *testing.T) {
	g := newGateBackend()
	b := bus.New(asyncBatchesBackend{g}, bus.WithPublishBatching(bus.PublishBatching{Window: 64}))
	defer closeBus(t, b)
	bg := context.Background()
	var rs []*bus.PublishResult
	for i := range 64 {
		rs = append(rs, b.PublishAsync(bg, "t", bmsg("m"+strconv.Itoa(i))))
	}
	var calls []*gateCall
	for range 16 {
		c := g.next(t)
		assert.LessOrEqual(t, len(c.ids), 4, "a batch holds at most Window/16 messages")
		calls = append(calls, c)
	}
	g.noCall(t)
	for _, c := range calls {
		close(c.release)
	}
	flushReleasing(t, g, b, 4, rs)
}

// flushReleasing flushes b while it lets through every batch g receives,
// each of at most maxBatch messages, and checks that every result in rs
// succeeded.
func flushReleasing(t *testing.T, g *gateBackend, b *bus.Bus, maxBatch int, rs []*bus.PublishResult) {
	t.Helper()
	flushed := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		flushed <- b.Flush(ctx)
	}()
	for done := false; !done; {
		select {
		case c := <-g.calls:
			assert.LessOrEqual(t, len(c.ids), maxBatch, "a batch holds at most %d messages", maxBatch)
			close(c.release)
		case err := <-flushed:
			require.NoError(t, err, "Flush")
			done = true
		}
	}
	for i, r := range rs {
		require.NoError(t, get(t, r), "m%d", i)
	}
}

// Once half of its 8 batches are in flight, a topic sends only full
// batches (Window/8 messages), and fewer waiting messages go when fewer
// than half are in flight: the batches in flight hold the window, not
// single messages.
func TestPublishAsyncSendsFullBatchesOnceHalfAreInFlight(t *testing.T) {
	g := newGateBackend()
	b := bus.New(g, bus.WithPublishBatching(bus.PublishBatching{Window: 64}))
	defer closeBus(t, b)
	bg := context.Background()
	var rs []*bus.PublishResult
	for i := range 36 {
		rs = append(rs, b.PublishAsync(bg, "t", bmsg("m"+strconv.Itoa(i))))
	}
	var singles, full []*gateCall
	for range 8 {
		c := g.next(t)
		switch len(c.ids) {
		case 1:
			singles = append(singles, c)
		case 8:
			full = append(full, c)
		default:
			t.Fatalf("a batch of %d messages %v: want 4 single messages, then full batches of Window/8", len(c.ids), c.ids)
		}
	}
	require.Len(t, singles, 4, "single messages go at once while fewer than half of the batches are in flight")
	require.Len(t, full, 4, "then only full batches go")
	for i := 36; i < 39; i++ {
		rs = append(rs, b.PublishAsync(bg, "t", bmsg("m"+strconv.Itoa(i))))
	}
	for _, c := range singles {
		close(c.release)
	}
	for i := range 4 {
		require.NoError(t, get(t, rs[i]), "m%d", i)
	}
	g.noCall(t)
	close(full[0].release)
	last := g.next(t)
	assert.Equal(t, []string{"m36", "m37", "m38"}, last.ids, "the waiting messages go once fewer than half of the batches are in flight")
	close(last.release)
	for _, c := range full[1:] {
		close(c.release)
	}
	ctx, cancel := context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	require.NoError(t, b.Flush(ctx), "Flush")
	for i, r := range rs {
		require.NoError(t, get(t, r), "m%d", i)
	}
}

func TestPublishAsyncRejectsBadInputBeforeIO(t *testing.T) {
	be := newKeyLogBackend()
	b := bus.New(be)
	defer closeBus(t, b)
	ctx := context.Background()
	tests := []struct {
		name  string
		topic string
		msg   *bus.Message
		want  error
	}{
		{"invalid topic", "bad topic", &bus.Message{}, bus.ErrInvalidTopic},
		{"nil message", "t", nil, bus.ErrInvalidMessage},
		{"reserved header", "t", &bus.Message{Headers: map[string]string{"bus-x": "v"}}, bus.ErrInvalidMessage},
		{"payload too large", "t", &bus.Message{Payload: make([]byte, bus.DefaultMaxPayload+1)}, bus.ErrPayloadTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := b.PublishAsync(ctx, tt.topic, tt.msg)
			require.True(t, known(r), "a bad input's result is known when PublishAsync returns")
			err := get(t, r)
			require.ErrorIs(t, err, tt.want)
			var pe *bus.PublishError
			if errors.As(err, &pe) {
				assert.True(t, pe.Rejected, "an invalid message is rejected, nothing sent")
			}
		})
	}
	flush(t, b)
	be.mu.Lock()
	defer be.mu.Unlock()
	assert.Zero(t, be.calls, "nothing reached the backend")
}

func TestPublishAsyncWithEndedCtxFailsAtOnceWithoutIO(t *testing.T) {
	be := newKeyLogBackend()
	b := bus.New(be)
	defer closeBus(t, b)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := b.PublishAsync(ctx, "t", keyed("a", 0))
	require.True(t, known(r), "a call whose ctx ended is known when PublishAsync returns")
	err := get(t, r)
	require.ErrorIs(t, err, context.Canceled, "the result carries ctx's error")
	assert.Equal(t, `bus: publish "t": context canceled`, err.Error(), "the error is Publish's for an ended ctx")
	perr := b.Publish(ctx, "t", keyed("b", 0))
	require.ErrorIs(t, perr, context.Canceled, "Publish gives the same class of error")
	require.ErrorIs(t, get(t, b.PublishAsync(context.Background(), "t", keyed("a", 1))), bus.ErrPublishPaused,
		"a later message of the key does not overtake the refused one")
	be.mu.Lock()
	calls := be.calls
	be.mu.Unlock()
	assert.Zero(t, calls, "nothing reached the backend")
}

func TestPublishAsyncFailurePausesTheKeyUntilResumed(t *testing.T) {
	errDown := errors.New("injected: store down")
	be := newKeyLogBackend()
	be.fail = func(m *bus.BackendMessage) error {
		if string(m.Payload) == "a-2" {
			return errDown
		}
		return nil
	}
	// One message per batch, so the failure of a-2 is the only failure
	// the backend makes.
	b := bus.New(be, bus.WithPublishBatching(bus.PublishBatching{MaxMessages: 1, MaxBatches: 4}))
	defer closeBus(t, b)
	ctx := context.Background()
	var ra, rb []*bus.PublishResult
	for i := range 10 {
		ra = append(ra, b.PublishAsync(ctx, "t", keyed("a", i)))
		rb = append(rb, b.PublishAsync(ctx, "t", keyed("b", i)))
	}
	flush(t, b)
	for i, r := range ra {
		err := get(t, r)
		switch {
		case i < 2:
			require.NoError(t, err, "a-%d came before the failure", i)
		case i == 2:
			var pe *bus.PublishError
			require.ErrorAs(t, err, &pe, "the failed message gets the partial-failure error")
			require.Len(t, pe.Failed, 1)
			assert.ErrorIs(t, err, errDown)
			assert.False(t, pe.Rejected)
		default:
			require.ErrorIs(t, err, bus.ErrPublishPaused, "a-%d follows a failed message of its key", i)
			assert.ErrorIs(t, err, errDown, "the paused error carries the failure that paused the key")
		}
	}
	for i, r := range rb {
		require.NoError(t, get(t, r), "b-%d: another key is not paused", i)
	}
	assert.Equal(t, seq("a", 0, 2), be.logOf("a"), "nothing of a is stored after its failed message")
	assert.Equal(t, seq("b", 0, 10), be.logOf("b"))

	r := b.PublishAsync(ctx, "t", keyed("a", 10))
	require.ErrorIs(t, get(t, r), bus.ErrPublishPaused, "the key stays paused for later calls")

	b.ResumePublish("t", "a")
	for i := 2; i < 10; i++ {
		if i == 2 {
			be.mu.Lock()
			be.fail = nil
			be.mu.Unlock()
		}
		require.NoError(t, get(t, b.PublishAsync(ctx, "t", keyed("a", i))), "a-%d again after ResumePublish", i)
	}
	assert.Equal(t, seq("a", 0, 10), be.logOf("a"), "republished in order after resuming")
}

func TestPublishAsyncMessageWhoseCtxEndedIsNotSent(t *testing.T) {
	g := newGateBackend()
	b := bus.New(g, bus.WithPublishBatching(bus.PublishBatching{MaxBatches: 1}))
	defer closeBus(t, b)
	bg := context.Background()
	r1 := b.PublishAsync(bg, "t", &bus.Message{ID: "m1", Key: "k"})
	c1 := g.next(t)
	ctx, cancel := context.WithCancel(bg)
	r2 := b.PublishAsync(ctx, "t", &bus.Message{ID: "m2", Key: "k"})
	r3 := b.PublishAsync(bg, "t", &bus.Message{ID: "m3", Key: "k"})
	r4 := b.PublishAsync(bg, "t", &bus.Message{ID: "m4", Key: "other"})
	cancel()
	close(c1.release)
	require.NoError(t, get(t, r1))
	require.ErrorIs(t, get(t, r2), context.Canceled, "a message whose ctx ended while it waited is not sent")
	require.ErrorIs(t, get(t, r3), bus.ErrPublishPaused, "a later message of its key does not overtake it")
	c2 := g.next(t)
	assert.Equal(t, []string{"m4"}, c2.ids, "only the other key's message is sent")
	close(c2.release)
	require.NoError(t, get(t, r4))
	g.noCall(t)
}

func TestPublishAsyncFullWindowWaitsWithinCtx(t *testing.T) {
	g := newGateBackend()
	b := bus.New(g, bus.WithPublishBatching(bus.PublishBatching{MaxBatches: 2, Window: 2}))
	defer closeBus(t, b)
	bg := context.Background()
	r1 := b.PublishAsync(bg, "t", bmsg("m1"))
	r2 := b.PublishAsync(bg, "t", bmsg("m2"))
	c1, c2 := g.next(t), g.next(t)
	if c1.ids[0] != "m1" {
		c1, c2 = c2, c1
	}

	ctx, cancel := context.WithTimeout(bg, 50*time.Millisecond)
	defer cancel()
	deadline, _ := ctx.Deadline()
	r3 := b.PublishAsync(ctx, "t", bmsg("m3"))
	require.True(t, known(r3), "PublishAsync returns when its ctx ends in a full window")
	require.ErrorIs(t, get(t, r3), context.DeadlineExceeded)
	assert.False(t, time.Now().Before(deadline), "it waited for room until ctx ended")
	g.noCall(t)

	keyedCtx, cancelKeyed := context.WithTimeout(bg, 20*time.Millisecond)
	defer cancelKeyed()
	r5 := b.PublishAsync(keyedCtx, "t", &bus.Message{Key: "k", Payload: []byte("k-0")})
	require.ErrorIs(t, get(t, r5), context.DeadlineExceeded)

	close(c1.release)
	require.NoError(t, get(t, r1))
	require.ErrorIs(t, get(t, b.PublishAsync(bg, "t", &bus.Message{Key: "k", Payload: []byte("k-1")})), bus.ErrPublishPaused,
		"a keyed message that found no room pauses its key")
	r4 := b.PublishAsync(bg, "t", bmsg("m4"))
	c4 := g.next(t)
	assert.Equal(t, []string{"m4"}, c4.ids, "a result made room")
	close(c2.release)
	close(c4.release)
	require.NoError(t, get(t, r2))
	require.NoError(t, get(t, r4))
}

func TestFlushWaitsForEveryEarlierResult(t *testing.T) {
	g := newGateBackend()
	b := bus.New(g)
	defer closeBus(t, b)
	bg := context.Background()
	require.NoError(t, b.Flush(bg), "nothing outstanding: Flush returns at once")
	r := b.PublishAsync(bg, "t", bmsg("m1"))
	c := g.next(t)

	ctx, cancel := context.WithTimeout(bg, 20*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, b.Flush(ctx), context.DeadlineExceeded, "Flush is bounded by its ctx")

	flushed := make(chan error, 1)
	go func() { flushed <- b.Flush(bg) }()
	select {
	case err := <-flushed:
		t.Fatalf("Flush returned (%v) while a result was outstanding", err)
	default:
	}
	close(c.release)
	select {
	case err := <-flushed:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Flush did not return within 10s of the last result")
	}
	require.True(t, known(r), "Flush returns once the result is known")
	require.NoError(t, get(t, r))
}

func TestCloseWaitsForPublishAsyncResults(t *testing.T) {
	g := newGateBackend()
	b := bus.New(g)
	bg := context.Background()
	r := b.PublishAsync(bg, "t", bmsg("m1"))
	c := g.next(t)
	closed := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(bg, 10*time.Second)
		defer cancel()
		closed <- b.Close(ctx)
	}()
	// A call that wins the race with Close is accepted: it queues behind
	// m1, and Close waits for it too.
	var early []*bus.PublishResult
	require.Eventually(t, func() bool {
		late := b.PublishAsync(bg, "t", bmsg("late"))
		if !known(late) {
			early = append(early, late)
			return false
		}
		return errors.Is(late.Get(bg), bus.ErrClosed)
	}, 10*time.Second, time.Millisecond, "PublishAsync after Close began fails with ErrClosed at once")
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while a result was outstanding", err)
	default:
	}
	close(c.release)
	stop := make(chan struct{})
	defer close(stop)
	go func() { // release the batches of the early calls, if any
		for {
			select {
			case c := <-g.calls:
				close(c.release)
			case <-stop:
				return
			}
		}
	}()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return within 10s of the last result")
	}
	require.True(t, known(r), "Close returns once every result is known")
	require.NoError(t, get(t, r))
	for _, e := range early {
		require.True(t, known(e), "Close returns once every accepted result is known")
		require.NoError(t, get(t, e))
	}
}

func TestPublishAsyncGoesThroughPublishMiddlewareInOrder(t *testing.T) {
	errDown := errors.New("injected")
	be := newKeyLogBackend()
	be.failAll = func(m *bus.BackendMessage) error {
		if string(m.Payload) == "k-20" {
			return errDown
		}
		return nil
	}
	var (
		mu   sync.Mutex
		seen = map[string]error{}
	)
	mw := func(next bus.Publisher) bus.Publisher {
		return middleware.PublishFunc(func(ctx context.Context, topic string, msgs ...*bus.Message) error {
			// A random pause, so the middleware calls finish out of order.
			time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
			cp := *msgs[0]
			cp.Headers = map[string]string{"mw": fmt.Sprint(ctx.Value(ctxKey{}))}
			err := next.Publish(ctx, topic, &cp)
			mu.Lock()
			seen[string(cp.Payload)] = err
			mu.Unlock()
			return err
		})
	}
	b := bus.New(be, bus.WithPublishMiddleware(mw), bus.WithPublishBatching(bus.PublishBatching{MaxMessages: 4, MaxBatches: 3}))
	defer closeBus(t, b)
	ctx := context.WithValue(context.Background(), ctxKey{}, "v")
	const n = 50
	var rk, rj []*bus.PublishResult
	for i := range n {
		rk = append(rk, b.PublishAsync(ctx, "t", keyed("k", i)))
		rj = append(rj, b.PublishAsync(ctx, "t", keyed("j", i)))
	}
	flush(t, b)
	// The batch of k-20 fails as a whole: k's stored messages are those
	// before the first failure, and every later one fails.
	stored := 0
	for stored < n && get(t, rk[stored]) == nil {
		stored++
	}
	require.LessOrEqual(t, stored, 20, "k-20 is not stored")
	require.ErrorIs(t, get(t, rk[stored]), errDown, "the first failed message of k has the backend's error")
	for i := stored + 1; i < n; i++ {
		err := get(t, rk[i])
		require.Error(t, err, "k-%d comes after a failed message of k", i)
		if !errors.Is(err, errDown) {
			require.ErrorIs(t, err, bus.ErrPublishPaused, "k-%d", i)
		}
	}
	assert.Equal(t, seq("k", 0, stored), be.logOf("k"), "the middleware's pauses do not reorder a key")
	var wantJ []string
	for i, r := range rj {
		if get(t, r) == nil {
			wantJ = append(wantJ, "j-"+strconv.Itoa(i))
		}
	}
	assert.Equal(t, wantJ, be.logOf("j"), "j's stored messages are in call order")
	mu.Lock()
	defer mu.Unlock()
	require.ErrorIs(t, seen["k-20"], errDown, "the middleware sees the message's own result")
	for i := range stored {
		require.NoError(t, seen["k-"+strconv.Itoa(i)])
	}
	be.mu.Lock()
	defer be.mu.Unlock()
	assert.Equal(t, "v", be.headerSeen["k-0"], "the middleware ran with the caller's ctx and its change was sent")
}

func TestPublishAsyncCopiesTheMessage(t *testing.T) {
	g := newGateBackend()
	b := bus.New(g)
	defer closeBus(t, b)
	bg := context.Background()
	m := &bus.Message{Payload: []byte("first"), Headers: map[string]string{"h": "1"}}
	r := b.PublishAsync(bg, "t", m)
	require.NotEmpty(t, m.ID, "PublishAsync assigns an ID as Publish does")
	copy(m.Payload, "XXXXX")
	m.Headers["h"] = "2"
	c := g.next(t)
	close(c.release)
	require.NoError(t, get(t, r))
	assert.Equal(t, []string{"first"}, c.bodies, "the caller may reuse its buffers once PublishAsync returned")
	assert.Equal(t, []string{m.ID}, c.ids)
}
