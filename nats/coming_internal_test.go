package nats

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
)

// openRequest sends a pull request for n messages that waits until it is
// full, and makes it the member's open request, as a Receive that
// returned early leaves it.
func openRequest(t *testing.T, s *jsSub, n int) {
	t.Helper()
	require.NoError(t, s.openRequest(n, pullWait, false), "pull request")
}

// messageIDs returns the IDs of msgs, in order.
func messageIDs(msgs []*backend.Message) []string {
	ids := make([]string, 0, len(msgs))
	for _, m := range msgs {
		ids = append(ids, m.ID)
	}
	return ids
}

func publishIDs(ctx context.Context, t *testing.T, b *Backend, topic string, ids ...string) {
	t.Helper()
	for _, id := range ids {
		require.NoError(t, b.Publish(ctx, topic, []*backend.Message{{ID: id, Payload: []byte("x")}}), "publish")
	}
}

// A Receive returns what has arrived of its request without waiting for
// the rest, Coming counts the rest, and later Receives hand it out.
func TestReceiveReturnsBeforeItsRequestIsFull(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, s, topic := newInternalSub(ctx, t, "coming")
	openRequest(t, s, 5)
	publishIDs(ctx, t, b, topic, "m-0", "m-1")
	require.Eventually(t, func() bool { return len(s.in.ch) >= 2 }, 5*time.Second, time.Millisecond,
		"the first deliveries reach the inbox")

	got, err := s.Receive(ctx, 5)
	require.NoError(t, err, "receive")
	require.Len(t, got, 2, "the Receive returns what has arrived")
	assert.Equal(t, 3, s.Coming(), "the rest of the request is coming")

	publishIDs(ctx, t, b, topic, "m-2", "m-3", "m-4")
	var ids []string
	for len(ids) < 3 {
		require.GreaterOrEqual(t, 5-2-len(ids), s.Coming(), "Coming never grows")
		more, err := s.Receive(ctx, s.Coming())
		require.NoError(t, err, "receive the rest")
		require.NotEmpty(t, more, "a Receive with messages coming waits for one")
		ids = append(ids, messageIDs(more)...)
	}
	assert.Equal(t, []string{"m-2", "m-3", "m-4"}, ids, "the rest comes in order")
	assert.Zero(t, s.Coming(), "nothing is coming once the request is full")
}

// A Receive whose ctx has ended while messages are coming returns those
// that arrived, and leaves nothing coming.
func TestReceiveWithEndedCtxReturnsWhatIsComing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, s, topic := newInternalSub(ctx, t, "coming-end")
	openRequest(t, s, 5)
	publishIDs(ctx, t, b, topic, "m-0")
	got, err := s.Receive(ctx, 5)
	require.NoError(t, err, "receive")
	require.Len(t, got, 1)
	require.Equal(t, 4, s.Coming(), "four are coming")
	require.NoError(t, s.Ack(ctx, []backend.AckID{got[0].AckID}), "ack")

	publishIDs(ctx, t, b, topic, "m-1", "m-2")
	require.Eventually(t, func() bool { return len(s.in.ch) >= 2 }, 5*time.Second, time.Millisecond,
		"the deliveries reach the inbox")
	ended, stop := context.WithCancel(ctx)
	stop()
	last, err := s.Receive(ended, s.Coming())
	require.ErrorIs(t, err, context.Canceled, "the Receive ends with its ctx")
	assert.Equal(t, []string{"m-1", "m-2"}, messageIDs(last), "what arrived is returned, for the bus to handle")
	assert.Zero(t, s.Coming(), "nothing is coming after a Receive whose ctx ended")

}

// With capacity beyond what is coming, a Receive asks for more with a
// second request, and an extra request the server refuses or ends empty
// is forgotten: Coming stays exact.
func TestExtraRequestKeepsComingExact(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, s, topic := newInternalSub(ctx, t, "coming-extra")
	require.NoError(t, s.openRequest(3, pullWait, false), "pull request")
	publishIDs(ctx, t, b, topic, "m-0")
	got, err := s.Receive(ctx, 3+s.maxBatch)
	require.NoError(t, err, "receive with room for an extra request")
	ids := messageIDs(got)
	publishIDs(ctx, t, b, topic, "m-1", "m-2", "m-3", "m-4")
	for len(ids) < 5 {
		more, err := s.Receive(ctx, max(s.Coming(), 1))
		require.NoError(t, err, "receive the rest")
		ids = append(ids, messageIDs(more)...)
	}
	assert.Equal(t, []string{"m-0", "m-1", "m-2", "m-3", "m-4"}, ids, "each message once, in order")
	for s.Coming() > 0 {
		more, err := s.Receive(ctx, s.Coming())
		require.NoError(t, err, "receive until the requests end")
		assert.Empty(t, more, "nothing more was published")
	}
	assert.Empty(t, s.open, "no request is open once nothing is coming")
}

// A member that closes while the messages of its pull request are still
// coming leaves them pending at the server until their AckWait (no
// Receive collects them): UnlockGroup lets its group lock lapse, so that
// the next holder takes it over and waits for them. A member whose
// request ended releases the lock.
func TestCloseWithMessagesComingLetsTheLockLapse(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, coming := range []bool{true, false} {
		b, s, topic := newInternalSub(ctx, t, fmt.Sprint("lapse", coming))
		held, _, err := b.LockGroup(ctx, topic, s.cfg.Group, "leaving", time.Minute)
		require.NoError(t, err)
		require.True(t, held)
		n := 2
		if coming {
			n = 5
		}
		openRequest(t, s, n)
		publishIDs(ctx, t, b, topic, "m-0", "m-1")
		require.Eventually(t, func() bool { return len(s.in.ch) >= 2 }, 5*time.Second, time.Millisecond,
			"the first deliveries reach the inbox")
		got, err := s.Receive(ctx, n)
		require.NoError(t, err, "receive")
		require.Len(t, got, 2)
		ids := make([]backend.AckID, 0, len(got))
		for _, m := range got {
			ids = append(ids, m.AckID)
		}
		require.NoError(t, s.Ack(ctx, ids))
		assert.Equal(t, n-2, s.Coming(), "coming %v", coming)
		require.NoError(t, s.Close())
		require.NoError(t, b.UnlockGroup(ctx, topic, s.cfg.Group, "leaving"))
		held, takeover, err := b.LockGroup(ctx, topic, s.cfg.Group, "next", time.Minute)
		require.NoError(t, err)
		require.True(t, held, "the leaving member's lock is free")
		assert.Equal(t, coming, takeover, "the next holder takes the lock over when messages were coming")
	}
}

// The server hands its open requests one delivery each in turn, and a
// request ends full without a word: Coming stays exact when one request
// ends early (here it expires) after sharing deliveries with another
// that then fills, and nothing is left waiting for messages that do
// not come.
func TestRequestsServedInTurnKeepComingExact(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, s, topic := newInternalSub(ctx, t, "coming-turns")
	require.NoError(t, s.openRequest(3, pullBrief, false), "a request that expires soon")
	require.NoError(t, s.openRequest(10, pullWait, true), "a request that waits")
	publishIDs(ctx, t, b, topic, "m-0", "m-1")
	// Each request gets one, then the first expires with a status.
	require.Eventually(t, func() bool { return len(s.in.ch) >= 3 }, 5*time.Second, time.Millisecond,
		"two deliveries and the end of the first request reach the inbox")
	ids := []string{"m-2", "m-3", "m-4", "m-5", "m-6", "m-7", "m-8", "m-9", "m-10"}
	publishIDs(ctx, t, b, topic, ids...)
	require.Eventually(t, func() bool { return len(s.in.ch) >= 12 }, 5*time.Second, time.Millisecond,
		"the second request's deliveries reach the inbox")

	got, err := s.Receive(ctx, 11)
	require.NoError(t, err, "receive")
	assert.Equal(t, append([]string{"m-0", "m-1"}, ids...), messageIDs(got), "every delivery, in order")
	assert.Zero(t, s.Coming(), "both requests have ended")
	assert.Empty(t, s.open, "no request is left open")
}

// A request that waits until it is full and whose end the server never
// confirms (a server before 2.10 drops one that expires as a message
// comes) is forgotten once its time is up: the Receive ends without an
// error, and the next asks again.
func TestBriefRequestEndedWithoutAWordIsForgotten(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, s, topic := newInternalSub(ctx, t, "coming-dropped")
	// The request as the client sees it, never sent.
	s.open = append(s.open, openPull{reply: s.inbox + "999", kind: pullBrief, asked: 4, left: 4, until: time.Now().Add(briefWait + briefGrace)})
	s.owed = 4
	start := time.Now()
	got, err := s.Receive(ctx, 4)
	require.NoError(t, err, "the Receive ends without an error")
	assert.Empty(t, got)
	assert.Less(t, time.Since(start), longPoll, "it ends when the request's time is up")
	assert.Zero(t, s.Coming(), "nothing is coming")
	assert.Empty(t, s.open)

	publishIDs(ctx, t, b, topic, "m-0")
	got, err = s.Receive(ctx, 4)
	require.NoError(t, err, "the next Receive asks again")
	require.Len(t, got, 1)
	assert.Equal(t, "m-0", got[0].ID)
}

// While messages flow fast, a request asks for what the flow brings in
// half of briefWait; once the flow stops, requests end with what the
// stream holds again.
func TestBriefBatchFollowsTheFlow(t *testing.T) {
	now := monoNow()
	start := now - int64(3*briefWait)
	s := &jsSub{flowFrom: start}
	const perSecond = 10000
	step := int64(time.Second) / perSecond
	for at := start; at <= now; at += step {
		s.owed = 1 << 20 // no request ends
		s.delivered(at)
	}
	want := perSecond * briefWait.Seconds() / 2
	assert.InDelta(t, want, s.briefBatch(), want/10, "what the flow brings in half of briefWait")

	s.rate = briefMin / briefWait.Seconds() // half of briefMin in half a window
	assert.Zero(t, s.briefBatch(), "a slow flow asks for what the stream holds")
	s.rate = perSecond
	s.flowFrom = monoNow() - 3*int64(briefWait)
	assert.Zero(t, s.briefBatch(), "a flow that stopped asks for what the stream holds")
}

// A Receive cut short while a request that waits until it is full is
// open waits for that request to expire rather than moving to a fresh
// inbox: what it delivered is returned, and nothing is coming after.
func TestCutShortWaitsForABriefRequestToExpire(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, s, topic := newInternalSub(ctx, t, "coming-brief-cut")
	inbox := s.inbox
	require.NoError(t, s.openRequest(5, pullBrief, false), "a request that waits until it is full")
	publishIDs(ctx, t, b, topic, "m-0", "m-1")
	require.Eventually(t, func() bool { return len(s.in.ch) >= 2 }, 5*time.Second, time.Millisecond,
		"the deliveries reach the inbox")
	cut, stop := context.WithCancel(ctx)
	stop()
	got, err := s.Receive(cut, 5)
	require.ErrorIs(t, err, context.Canceled, "the Receive ends with its ctx")
	assert.Equal(t, []string{"m-0", "m-1"}, messageIDs(got), "what the request delivered is returned")
	assert.Zero(t, s.Coming(), "nothing is coming")
	assert.Equal(t, inbox, s.inbox, "the request ended (expired) in time: the member keeps its inbox")
}
