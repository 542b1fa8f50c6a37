package bus_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
)

// eachBackend implements backend.EachPublisher: each call waits for the
// test, which reports its messages one by one (report) and then lets the
// call return (finish). It logs the payloads of each key in the order
// they were reported stored.
type eachBackend struct {
	nopBackend
	calls chan *eachCall

	mu  sync.Mutex
	log map[string][]string
}

// plain is a message without a key.
func plain(payload string) *bus.Message { return &bus.Message{Payload: []byte(payload)} }

// eachCall is one PublishEach (or Publish) call waiting for the test.
type eachCall struct {
	be       *eachBackend
	each     bool // PublishEach, not Publish
	payloads []string
	keys     []string
	report   func(int, error)
	errs     []error // Publish's outcome, set by report
	ret      chan error
	returned chan struct{}
}

func newEachBackend() *eachBackend {
	return &eachBackend{calls: make(chan *eachCall, 100), log: map[string][]string{}}
}

func (e *eachBackend) call(msgs []*bus.BackendMessage, each bool, report func(int, error)) *eachCall {
	c := &eachCall{be: e, each: each, report: report, errs: make([]error, len(msgs)), ret: make(chan error, 1), returned: make(chan struct{})}
	for _, m := range msgs {
		c.payloads = append(c.payloads, string(m.Payload))
		c.keys = append(c.keys, m.Key)
	}
	e.calls <- c
	return c
}

func (e *eachBackend) PublishEach(_ context.Context, _ string, msgs []*bus.BackendMessage, report func(int, error)) error {
	c := e.call(msgs, true, report)
	defer close(c.returned)
	return <-c.ret
}

// Publish holds the batch until the test finishes it, and returns the
// outcomes the test reported.
func (e *eachBackend) Publish(_ context.Context, _ string, msgs []*bus.BackendMessage) error {
	c := e.call(msgs, false, nil)
	defer close(c.returned)
	if err := <-c.ret; err != nil {
		return err
	}
	var failed []backend.Failure
	for i, err := range c.errs {
		if err != nil {
			failed = append(failed, backend.Failure{Index: i, Err: err})
		}
	}
	if failed != nil {
		return &backend.BatchError{Failed: failed}
	}
	return nil
}

// next returns the next call, failing the test when none comes within
// 10 s.
func (e *eachBackend) next(t *testing.T) *eachCall {
	t.Helper()
	return within(t, e.calls, "publish call")
}

// reportOne gives message i its outcome.
func (c *eachCall) reportOne(i int, err error) {
	if err == nil {
		c.be.mu.Lock()
		c.be.log[c.keys[i]] = append(c.be.log[c.keys[i]], c.payloads[i])
		c.be.mu.Unlock()
	}
	if c.each {
		c.report(i, err)
		return
	}
	c.errs[i] = err
}

// finish lets the call return err and waits until it did.
func (c *eachCall) finish(t *testing.T, err error) {
	t.Helper()
	c.ret <- err
	select {
	case <-c.returned:
	case <-time.After(10 * time.Second):
		t.Fatal("a publish call did not return within 10s")
	}
}

func (e *eachBackend) logOf(key string) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.log[key])
}

// fillEager publishes the 4 messages that go alone while fewer than half
// of the 8 batches are in flight, and returns their calls: later
// messages then go as full batches.
func fillEager(t *testing.T, b *bus.Bus, be *eachBackend) ([]*bus.PublishResult, []*eachCall) {
	t.Helper()
	var rs []*bus.PublishResult
	var calls []*eachCall
	for i := range 4 {
		rs = append(rs, b.PublishAsync(context.Background(), "t", plain("single-"+strconv.Itoa(i))))
		calls = append(calls, be.next(t))
	}
	return rs, calls
}

func TestPublishAsyncCompletesEachMessageWhenItsOutcomeArrives(t *testing.T) {
	be := newEachBackend()
	// Window 16 over 8 batches: full batches of 2.
	b := bus.New(be, bus.WithPublishBatching(bus.PublishBatching{Window: 16}))
	defer closeBus(t, b)
	bg := context.Background()
	singles, singleCalls := fillEager(t, b, be)
	var rs []*bus.PublishResult
	var calls []*eachCall
	for i := range 12 {
		rs = append(rs, b.PublishAsync(bg, "t", plain("m-"+strconv.Itoa(i))))
		if i%2 == 1 {
			c := be.next(t)
			require.True(t, c.each, "the batch goes through PublishEach")
			require.Equal(t, []string{"m-" + strconv.Itoa(i-1), "m-" + strconv.Itoa(i)}, c.payloads, "a full batch of 2")
			calls = append(calls, c)
		}
	}
	// The window holds 16 messages: the next PublishAsync waits for room.
	waiting := make(chan *bus.PublishResult, 1)
	go func() { waiting <- b.PublishAsync(bg, "t", plain("late")) }()
	select {
	case <-waiting:
		t.Fatal("PublishAsync returned while the window was full")
	case <-time.After(20 * time.Millisecond):
	}

	// The bus completes a message within the report call.
	calls[0].reportOne(0, nil)
	require.True(t, known(rs[0]), "m-0's result is known once its outcome is, before its batch's last message")
	require.NoError(t, get(t, rs[0]), "m-0")
	assert.False(t, known(rs[1]), "m-1 has no outcome yet")
	var late *bus.PublishResult
	select {
	case late = <-waiting:
	case <-time.After(10 * time.Second):
		t.Fatal("m-0's room in the window was not given back while its batch was in flight")
	}

	calls[0].reportOne(1, errors.New("boom"))
	err := get(t, rs[1])
	var pe *bus.PublishError
	require.ErrorAs(t, err, &pe, "m-1 fails with a PublishError")
	require.Len(t, pe.Failed, 1, "listing m-1")
	assert.NotEmpty(t, pe.Failed[0].ID, "with its ID")
	calls[0].finish(t, nil)

	// A whole batch's error is the outcome of its messages not reported.
	calls[1].reportOne(0, nil)
	calls[1].finish(t, bus.ErrClosed)
	require.NoError(t, get(t, rs[2]), "m-2 was reported stored")
	require.ErrorIs(t, get(t, rs[3]), bus.ErrClosed, "m-3 takes the batch's error")

	for _, c := range append(singleCalls, calls[2:]...) {
		for j := range c.payloads {
			c.reportOne(j, nil)
		}
		c.finish(t, nil)
	}
	lc := be.next(t)
	lc.reportOne(0, nil)
	lc.finish(t, nil)
	flush(t, b)
	require.NoError(t, get(t, late), "the message that waited for room")
	for i, r := range singles {
		require.NoError(t, get(t, r), "single-%d", i)
	}
	for i := 4; i < 12; i++ {
		require.NoError(t, get(t, rs[i]), "m-%d", i)
	}
}

func TestPublishAsyncKeepsKeyOrderWhenAMessageMidBatchFails(t *testing.T) {
	be := newEachBackend()
	// Window 24 over 8 batches: full batches of 3.
	b := bus.New(be, bus.WithPublishBatching(bus.PublishBatching{Window: 24}))
	defer closeBus(t, b)
	bg := context.Background()
	singles, singleCalls := fillEager(t, b, be)
	var rs []*bus.PublishResult
	for i := range 3 {
		rs = append(rs, b.PublishAsync(bg, "t", keyed("a", i)))
	}
	c := be.next(t)
	require.True(t, c.each, "the batch goes through PublishEach")
	require.Equal(t, seq("a", 0, 3), c.payloads, "a-0, a-1 and a-2 go in one batch")
	// a-3 waits: its key is in flight.
	rs = append(rs, b.PublishAsync(bg, "t", keyed("a", 3)))

	// The bus completes a message (or holds it back) within the report
	// call.
	c.reportOne(1, nil)
	c.reportOne(2, nil)
	assert.False(t, known(rs[1]), "a-1's result waits for a-0's: a key's results complete in call order")
	assert.False(t, known(rs[2]), "a-2's result waits for a-0's")

	c.reportOne(0, errors.New("boom"))
	require.Error(t, get(t, rs[0]), "a-0 failed")
	require.NoError(t, get(t, rs[1]), "a-1 was stored, and its result says so")
	require.NoError(t, get(t, rs[2]), "a-2 was stored, and its result says so")
	require.ErrorIs(t, get(t, rs[3]), bus.ErrPublishPaused, "a-3, queued behind the failure, is not sent")
	c.finish(t, nil)
	require.ErrorIs(t, get(t, b.PublishAsync(bg, "t", keyed("a", 4))), bus.ErrPublishPaused, "the key stays paused")

	for _, sc := range singleCalls {
		sc.reportOne(0, nil)
		sc.finish(t, nil)
	}
	for i, r := range singles {
		require.NoError(t, get(t, r), "single-%d", i)
	}
	b.ResumePublish("t", "a")
	r5 := b.PublishAsync(bg, "t", keyed("a", 5))
	c5 := be.next(t)
	assert.Equal(t, []string{"a-5"}, c5.payloads, "a resumed key is sent again")
	c5.reportOne(0, nil)
	c5.finish(t, nil)
	require.NoError(t, get(t, r5), "a-5")
	flush(t, b)
	assert.Equal(t, []string{"a-1", "a-2", "a-5"}, be.logOf("a"), "nothing of the key is stored after the failure until it is resumed")
	select {
	case extra := <-be.calls:
		t.Fatalf("an unexpected publish call of %v", extra.payloads)
	default:
	}
}
