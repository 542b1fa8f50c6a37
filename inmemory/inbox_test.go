package inmemory

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
)

// inboxWait bounds every wait in these tests; a Publish or Receive that
// hangs fails the test with a message instead of the test binary's
// timeout.
const inboxWait = 10 * time.Second

func batch(prefix string, from, n int) []*backend.Message {
	out := make([]*backend.Message, n)
	for i := range out {
		id := prefix + "-" + strconv.Itoa(from+i)
		out[i] = &backend.Message{ID: id, Payload: []byte("payload of " + id)}
	}
	return out
}

// publishWhileHeld takes tp's lock, as a Receive or an Ack holding the
// log would, and publishes msgs to tp from another goroutine; it fails
// the test unless that Publish returns, without error, while the lock is
// still held. On success the caller lets go of the lock (tp.unlock); on
// failure it is let go before the test stops, so the cleanup that closes
// the backend does not wait for it.
func publishWhileHeld(t *testing.T, be *Backend, tp *topic, msgs []*backend.Message) {
	t.Helper()
	tp.mu.Lock()
	published := make(chan error, 1)
	go func() { published <- be.Publish(context.Background(), tp.name, msgs) }()
	select {
	case err := <-published:
		if err != nil {
			tp.mu.Unlock()
			t.Fatalf("publish while the log is held: %v", err)
		}
	case <-time.After(inboxWait):
		tp.mu.Unlock()
		t.Fatal("Publish waited for the log lock")
	}
}

// A Publish that finds the log held by a Receive or an Ack returns without
// waiting for it; the holder appends the batch when it lets go, and wakes
// a member blocked in Receive.
func TestPublishDoesNotWaitForTheLogAndTheHolderAppendsIt(t *testing.T) {
	be := newTestBackend(t, nil)
	s := subscribeGroup(t, be, "inbox", "g")
	tp := be.br.lookup("inbox")

	got := make(chan []*backend.Message, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), inboxWait)
		defer cancel()
		for ctx.Err() == nil {
			if m, err := s.Receive(ctx, 10); len(m) > 0 || err != nil {
				out := make([]*backend.Message, len(m))
				for i := range m {
					cp := *m[i]
					out[i] = &cp
				}
				got <- out
				return
			}
		}
		got <- nil
	}()
	// Wait until the member is blocked in Receive, waiting to be woken.
	require.Eventually(t, func() bool {
		tp.lock()
		defer tp.unlock()
		return tp.glist[0].wakeCh != nil
	}, inboxWait, time.Millisecond, "the member blocks in Receive")

	publishWhileHeld(t, be, tp, batch("m", 0, 3))
	assert.True(t, tp.inboxFull.Load(), "the batch waits in the inbox")
	assert.Equal(t, uint64(0), tp.head, "nothing is in the log yet")
	assert.Equal(t, int64(3), tp.live.Load(), "the inbox's entries count against the backlog")
	tp.unlock()

	select {
	case m := <-got:
		require.Len(t, m, 3, "the holder appended the batch and woke the member")
		for i, msg := range m {
			assert.Equal(t, fmt.Sprintf("m-%d", i), msg.ID)
			assert.Equal(t, "payload of "+msg.ID, string(msg.Payload))
		}
	case <-time.After(inboxWait):
		t.Fatal("the member blocked in Receive was not woken")
	}
	st, ok := be.Stats("inbox")
	require.True(t, ok)
	assert.Equal(t, 3, st.Backlog)
	assert.Equal(t, uint64(3), st.Published)
	assert.False(t, tp.inboxFull.Load(), "the inbox is empty")
}

// Batches offered while the log is held count against the backlog limit
// exactly: no more is accepted than fits, a refused batch stores nothing,
// and each publisher's messages keep their order, whichever way each of
// its batches went.
func TestOfferedBatchesKeepTheBacklogLimitAndTheOrder(t *testing.T) {
	const limit, size, publishers = 100, 3, 8
	be := newTestBackend(t, &Options{MaxBacklog: limit, BacklogPolicy: BacklogError})
	s := subscribeGroup(t, be, "limit", "g")
	tp := be.br.lookup("limit")

	tp.mu.Lock()
	accepted := make([]int, publishers)
	errs := make(chan error, publishers)
	var wg sync.WaitGroup
	for p := range publishers {
		wg.Go(func() {
			for {
				err := be.Publish(context.Background(), "limit", batch(strconv.Itoa(p), accepted[p], size))
				if err != nil {
					errs <- err
					return
				}
				accepted[p] += size
			}
		})
	}
	// With the log held, every batch accepted so far went to the inbox.
	require.Eventually(t, func() bool { return tp.live.Load() > limit-size }, inboxWait, time.Millisecond,
		"publishers fill the backlog through the inbox while the log is held")
	assert.LessOrEqual(t, tp.live.Load(), int64(limit), "the inbox never holds more than the backlog limit")
	assert.Equal(t, uint64(0), tp.head, "nothing reached the log while it was held")
	tp.unlock()

	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(inboxWait):
		t.Fatal("publishers did not finish")
	}
	close(errs)
	for err := range errs {
		require.ErrorIs(t, err, ErrBacklogFull, "every publisher stops at a full backlog")
	}
	total := 0
	for _, n := range accepted {
		total += n
	}
	st, ok := be.Stats("limit")
	require.True(t, ok)
	assert.Equal(t, total, st.Backlog, "the backlog holds what Publish accepted")
	assert.Equal(t, uint64(total), st.Published)
	assert.GreaterOrEqual(t, total, limit-size+1, "a batch is refused only when it does not fit")
	assert.LessOrEqual(t, total, limit)

	next := make([]int, publishers)
	ctx, cancel := context.WithTimeout(context.Background(), inboxWait)
	defer cancel()
	for n := 0; n < total; {
		m, err := s.Receive(ctx, limit)
		require.NoError(t, err, "received %d of %d", n, total)
		for _, msg := range m {
			p, seq, _ := strings.Cut(msg.ID, "-")
			pi, _ := strconv.Atoi(p)
			require.Equal(t, strconv.Itoa(next[pi]), seq, "publisher %s's messages arrive in order", p)
			require.Equal(t, "payload of "+msg.ID, string(msg.Payload))
			next[pi]++
		}
		n += len(m)
	}
	assert.Equal(t, accepted, next, "every accepted message arrived once")
}

// A batch that does not fit in what the inbox may still take is not
// refused on that account: its publisher waits for the log and decides
// there, as it would have without the inbox.
func TestAPublisherTheInboxRefusesWaitsForRoom(t *testing.T) {
	be := newTestBackend(t, &Options{MaxBacklog: 4})
	s := subscribeGroup(t, be, "room", "g")
	tp := be.br.lookup("room")
	require.NoError(t, be.Publish(context.Background(), "room", batch("a", 0, 4)))

	tp.mu.Lock()
	published := make(chan error, 1)
	go func() { published <- be.Publish(context.Background(), "room", batch("b", 0, 2)) }()
	tp.unlock()
	require.Eventually(t, func() bool {
		tp.lock()
		defer tp.unlock()
		return tp.spaceCh != nil
	}, inboxWait, time.Millisecond, "the publisher waits for room")
	select {
	case err := <-published:
		t.Fatalf("Publish returned %v with the backlog full", err)
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), inboxWait)
	defer cancel()
	m, err := s.Receive(ctx, 4)
	require.NoError(t, err)
	require.Len(t, m, 4)
	require.NoError(t, s.Ack(ctx, []backend.AckID{m[0].AckID, m[1].AckID}))
	select {
	case err := <-published:
		require.NoError(t, err, "room after two acks")
	case <-time.After(inboxWait):
		t.Fatal("Publish still waiting after acks made room")
	}
	m, err = s.Receive(ctx, 4)
	require.NoError(t, err)
	require.Len(t, m, 2)
	assert.Equal(t, "b-0", m[0].ID)
	assert.Equal(t, "b-1", m[1].ID)
}
