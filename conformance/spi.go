package conformance

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
)

// The SPI cases drive backend.Backend and backend.Subscription directly,
// without the bus, as gocloud's drivertest does: the bus hides breaches
// (it hands back excess messages, copies what it needs, bounds Close), so
// only a direct check shows them.

// spiEnv is one fresh backend and a topic of its own.
type spiEnv struct {
	t     *testing.T
	s     *suite
	be    backend.Backend
	topic string
}

func (s *suite) newSPI(t *testing.T, label string) *spiEnv {
	t.Helper()
	be := s.newBackend(t)
	t.Cleanup(func() { _ = be.Close() })
	return &spiEnv{t: t, s: s, be: be, topic: "conf.spi." + label + "." + uniqueSuffix()}
}

func (e *spiEnv) subscribe(group string, ackTimeout time.Duration) backend.Subscription {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), e.s.deadline())
	defer cancel()
	start := backend.StartNewest // a backend without StartOldest refuses it
	if e.s.caps.StartOldest {
		start = backend.StartOldest
	}
	sub, err := e.be.Subscribe(ctx, e.topic, backend.SubscribeConfig{
		Group: group, StartFrom: start, AckTimeout: ackTimeout, MaxInFlight: 64,
		MaxDeliveries: 100, Observer: &eventLog{},
	})
	require.NoError(e.t, err, "subscribe")
	e.t.Cleanup(func() { _ = sub.Close() })
	return sub
}

func (e *spiEnv) publish(msgs ...*backend.Message) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), e.s.deadline())
	defer cancel()
	for _, m := range msgs {
		if m.PublishedAt.IsZero() {
			m.PublishedAt = time.Now()
		}
	}
	require.NoError(e.t, e.be.Publish(ctx, e.topic, msgs), "publish")
}

// receive calls Receive until n messages arrived, copying them (a backend
// may reuse the structs on the next call).
func (e *spiEnv) receive(sub backend.Subscription, n, max int) []backend.Message {
	e.t.Helper()
	deadline := time.Now().Add(e.s.deadline())
	var got []backend.Message
	for len(got) < n {
		require.True(e.t, time.Now().Before(deadline), "received %d of %d messages within %v", len(got), n, e.s.deadline())
		ctx, cancel := context.WithTimeout(context.Background(), e.s.deadline())
		msgs, err := sub.Receive(ctx, max)
		cancel()
		require.NoError(e.t, err, "receive")
		require.LessOrEqual(e.t, len(msgs), max, "Receive returned %d messages for max %d", len(msgs), max)
		for _, m := range msgs {
			got = append(got, *m)
		}
	}
	return got
}

func spiMessage(id string) *backend.Message {
	return &backend.Message{ID: id, Key: "k-" + id, Headers: map[string]string{"h": "v-" + id}, Payload: []byte("payload-" + id)}
}

// testSPIReceiveAtMostMax: Receive never returns more than max.
func testSPIReceiveAtMostMax(t *testing.T, s *suite) {
	e := s.newSPI(t, "max")
	sub := e.subscribe("g", s.longLease())
	for i := range 10 {
		e.publish(spiMessage(fmt.Sprintf("m%d", i)))
	}
	got := e.receive(sub, 10, 3)
	assert.Len(t, got, 10, "every message, three at a time at most")
}

// testSPIReceiveHonoursCtx: a Receive blocked on an empty topic returns
// the ctx's error once its ctx is cancelled, not an empty success.
func testSPIReceiveHonoursCtx(t *testing.T, s *suite) {
	e := s.newSPI(t, "ctx")
	sub := e.subscribe("g", s.longLease())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := sub.Receive(ctx, 1)
		done <- err
	}()
	cancel()
	select {
	case err := <-done:
		require.Error(t, err, "a cancelled Receive returns an error, not an empty result")
		assert.ErrorIs(t, err, context.Canceled)
	case <-time.After(s.deadline()):
		t.Fatalf("Receive did not return within %v after its ctx was cancelled", s.deadline())
	}
}

// testSPIReceiveAfterClose: Receive after Subscription.Close returns
// ErrClosed, and Backend.Close ends the subscriptions still open.
func testSPIReceiveAfterClose(t *testing.T, s *suite) {
	e := s.newSPI(t, "closed")
	sub := e.subscribe("g", s.longLease())
	require.NoError(t, sub.Close(), "close the subscription")
	ctx, cancel := context.WithTimeout(context.Background(), s.deadline())
	defer cancel()
	_, err := sub.Receive(ctx, 1)
	require.ErrorIs(t, err, backend.ErrClosed, "Receive after Subscription.Close")

	live := e.subscribe("g2", s.longLease())
	require.NoError(t, e.be.Close(), "close the backend")
	_, err = live.Receive(ctx, 1)
	require.ErrorIs(t, err, backend.ErrClosed, "Backend.Close ends live subscriptions")
	err = e.be.Publish(ctx, e.topic, []*backend.Message{spiMessage("late")})
	require.ErrorIs(t, err, backend.ErrClosed, "Publish after Backend.Close")
}

// testSPIReceiveInProgressAtClose: a Receive blocked on an empty topic
// returns promptly with ErrClosed when its subscription is closed, and
// another when the whole backend is closed. Each Close races a Receive
// that has just been started, so both orders (Close first, Receive
// first) are exercised over the rounds; either must give ErrClosed.
func testSPIReceiveInProgressAtClose(t *testing.T, s *suite) {
	e := s.newSPI(t, "closing")
	ctx, cancel := context.WithTimeout(context.Background(), 4*s.deadline())
	defer cancel()
	receive := func(sub backend.Subscription) <-chan error {
		started := make(chan struct{})
		done := make(chan error, 1)
		go func() {
			close(started)
			_, err := sub.Receive(ctx, 1)
			done <- err
		}()
		<-started
		return done
	}
	wait := func(done <-chan error, what string) error {
		select {
		case err := <-done:
			return err
		case <-time.After(s.deadline()):
			t.Fatalf("a Receive in progress did not return within %v after %s", s.deadline(), what)
			return nil
		}
	}
	for round := range 3 {
		sub := e.subscribe(fmt.Sprintf("g%d", round), s.longLease())
		done := receive(sub)
		require.NoError(t, sub.Close(), "round %d: close the subscription", round)
		err := wait(done, "Subscription.Close")
		require.ErrorIs(t, err, backend.ErrClosed, "round %d: a Receive in progress at Subscription.Close", round)
	}
	live := e.subscribe("g-live", s.longLease())
	done := receive(live)
	require.NoError(t, e.be.Close(), "close the backend")
	err := wait(done, "Backend.Close")
	require.ErrorIs(t, err, backend.ErrClosed, "a Receive in progress at Backend.Close")
}

// testSPIAckSettlesIdempotently: an acked message is not delivered again,
// and acking it twice is not an error.
func testSPIAckSettlesIdempotently(t *testing.T, s *suite) {
	e := s.newSPI(t, "ack")
	sub := e.subscribe("g", s.ackTimeout())
	e.publish(spiMessage("a"))
	m := e.receive(sub, 1, 1)[0]
	ctx, cancel := context.WithTimeout(context.Background(), s.deadline())
	defer cancel()
	require.NoError(t, sub.Ack(ctx, []backend.AckID{m.AckID}), "ack")
	require.NoError(t, sub.Ack(ctx, []backend.AckID{m.AckID}), "a second ack is not an error")
	requireNothingFor(t, sub, s.quiet(), "an acked message is not delivered again")
}

// requireNothingFor fails if sub delivers anything within window.
func requireNothingFor(t *testing.T, sub backend.Subscription, window time.Duration, msg string) {
	t.Helper()
	end := time.Now().Add(window)
	for {
		left := time.Until(end)
		if left <= 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), left)
		msgs, err := sub.Receive(ctx, 10)
		cancel()
		if len(msgs) > 0 {
			t.Fatalf("%s: got %q (attempt %d)", msg, msgs[0].ID, msgs[0].Attempt)
		}
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s: receive: %v", msg, err)
		}
	}
}

// testSPIStaleRule: once a lease ran out and the message was delivered
// again, Nack, Extend and DeadLetter of the old AckID fail with ErrStale
// and leave the newer delivery alone; an Ack of the old AckID settles the
// message; attempts count up.
func testSPIStaleRule(t *testing.T, s *suite) {
	e := s.newSPI(t, "stale")
	sub := e.subscribe("g", s.ackTimeout())
	e.publish(spiMessage("s"))
	first := e.receive(sub, 1, 1)[0]
	require.Equal(t, 1, first.Attempt, "first delivery")
	second := e.receive(sub, 1, 1)[0] // after the lease ran out
	require.Equal(t, first.ID, second.ID)
	require.Equal(t, 2, second.Attempt, "the redelivery after the lease ran out counts up")

	ctx, cancel := context.WithTimeout(context.Background(), s.deadline())
	defer cancel()
	require.ErrorIs(t, sub.Nack(ctx, first.AckID, 0), backend.ErrStale, "nack of a stale delivery")
	if ext, ok := sub.(backend.Extender); ok {
		require.ErrorIs(t, ext.Extend(ctx, first.AckID), backend.ErrStale, "extend of a stale delivery")
		require.NoError(t, ext.Extend(ctx, second.AckID), "the newer delivery is untouched and can be extended")
	}
	if dl, ok := sub.(backend.DeadLetterer); ok {
		cp := backend.NewDeadLetter(&first, backend.DeadLetterInfo{Topic: e.topic, Group: "g", Attempt: 1, Code: backend.CodeRejected, Reason: "stale"})
		require.ErrorIs(t, dl.DeadLetter(ctx, first.AckID, e.topic+".dlq", cp), backend.ErrStale, "dead-letter of a stale delivery")
	}
	require.NoError(t, sub.Ack(ctx, []backend.AckID{first.AckID}), "an ack of a stale delivery is never an error")
	requireNothingFor(t, sub, s.quiet(), "the ack of the stale delivery settled the message")
}

// testSPIAttemptCountsUp: a nack redelivers with Attempt+1.
func testSPIAttemptCountsUp(t *testing.T, s *suite) {
	e := s.newSPI(t, "attempt")
	sub := e.subscribe("g", s.longLease())
	e.publish(spiMessage("n"))
	ctx, cancel := context.WithTimeout(context.Background(), s.deadline())
	defer cancel()
	for want := 1; want <= 3; want++ {
		m := e.receive(sub, 1, 1)[0]
		require.Equal(t, want, m.Attempt, "attempt of delivery %d", want)
		if want < 3 {
			require.NoError(t, sub.Nack(ctx, m.AckID, 0), "nack")
		} else {
			require.NoError(t, sub.Ack(ctx, []backend.AckID{m.AckID}), "ack")
		}
	}
}

// testSPIPublishCopiesBuffers: Publish keeps none of the caller's buffers:
// changing them after Publish returned changes nothing delivered.
func testSPIPublishCopiesBuffers(t *testing.T, s *suite) {
	e := s.newSPI(t, "copy")
	sub := e.subscribe("g", s.longLease())
	payload := []byte("original payload")
	headers := map[string]string{"h": "original"}
	m := &backend.Message{ID: "copy-1", Key: "k", Headers: headers, Payload: payload}
	e.publish(m)
	copy(payload, "XXXXXXXXXXXXXXXX")
	headers["h"] = "changed"
	headers["extra"] = "added"
	m.ID, m.Key = "changed-id", "changed-key"
	got := e.receive(sub, 1, 1)[0]
	assert.Equal(t, "copy-1", got.ID, "ID")
	assert.Equal(t, "k", got.Key, "key")
	assert.Equal(t, "original payload", string(got.Payload), "the payload is the one given to Publish")
	assert.Equal(t, map[string]string{"h": "original"}, got.Headers, "the headers are the ones given to Publish")
}

// testSPICapabilitiesAgree: Capabilities.Extend agrees with Extender.
func testSPICapabilitiesAgree(t *testing.T, s *suite) {
	e := s.newSPI(t, "caps")
	sub := e.subscribe("g", s.longLease())
	_, ext := sub.(backend.Extender)
	assert.Equal(t, e.be.Capabilities().Extend, ext, "Capabilities.Extend must say whether subscriptions implement backend.Extender")
	if e.be.Capabilities().Broadcast {
		_, del := e.be.(backend.GroupDeleter)
		_, lock := e.be.(backend.GroupLocker)
		_, in := e.be.(backend.Inspector)
		assert.True(t, del && lock && in, "Capabilities.Broadcast needs backend.GroupDeleter (%v), GroupLocker (%v) and Inspector (%v)", del, lock, in)
	}
	if e.be.Capabilities().Results {
		_, results := e.be.(backend.ResultStore)
		assert.True(t, results, "Capabilities.Results needs backend.ResultStore")
	}
}

// caseLimit bounds one case; past it the watchdog ends the test binary
// with the case's name and a summary of the goroutines, so a broken
// backend can never hang go test.
func caseLimit(s *suite) time.Duration { return 6 * s.deadline() }

// watchdog starts the watchdog of one case and returns its stop function.
func watchdog(name string, limit time.Duration) func() {
	timer := time.AfterFunc(limit, func() {
		panic(fmt.Sprintf("conformance: case %s did not finish within %v; the backend hangs.\n%s", name, limit, goroutineSummary()))
	})
	return func() { timer.Stop() }
}

// goroutineSummary lists the top frame of each goroutine that is in the
// backend or the bus, to point at what hangs.
func goroutineSummary() string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var b strings.Builder
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		lines := strings.Split(g, "\n")
		if len(lines) < 2 {
			continue
		}
		for _, l := range lines[1:] {
			if strings.Contains(l, "eventbus-go/bus") && !strings.Contains(l, "conformance.goroutineSummary") {
				fmt.Fprintf(&b, "  %s: %s\n", lines[0], strings.TrimSpace(l))
				break
			}
		}
	}
	return "goroutines in the bus or backend:\n" + b.String()
}
