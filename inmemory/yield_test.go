package inmemory

import (
	"bytes"
	"context"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
)

// countYields makes be's publishers count their yields instead of
// yielding.
func countYields(be *Backend) *atomic.Int64 {
	var n atomic.Int64
	be.br.yield = func() { n.Add(1) }
	return &n
}

// A publisher yields once per Publish while the backlog of a topic with a
// group is past an eighth of the entry limit, and not otherwise.
func TestAPublisherYieldsWhileItIsAheadOfTheGroups(t *testing.T) {
	ctx := context.Background()
	be := newTestBackend(t, &Options{MaxBacklog: 80}) // yields past 10 entries
	yields := countYields(be)

	require.NoError(t, be.Publish(ctx, "nogroup", batch("n", 0, 40)))
	assert.Zero(t, yields.Load(), "a topic without a group has no consumer to yield to")

	s := subscribeGroup(t, be, "ahead", "g")
	require.NoError(t, be.Publish(ctx, "ahead", batch("a", 0, 5)))
	require.NoError(t, be.Publish(ctx, "ahead", batch("a", 5, 5)))
	assert.Zero(t, yields.Load(), "10 entries are not past an eighth of 80")
	require.NoError(t, be.Publish(ctx, "ahead", batch("a", 10, 1)))
	assert.Equal(t, int64(1), yields.Load(), "11 entries are: one yield for the call")
	require.NoError(t, be.Publish(ctx, "ahead", batch("a", 11, 3)))
	assert.Equal(t, int64(2), yields.Load(), "one yield per call while ahead")

	// The group catches up: settling the backlog stops the yields.
	ms, err := s.Receive(ctx, 100)
	require.NoError(t, err)
	require.Len(t, ms, 14)
	ackAll(t, s, ms)
	require.NoError(t, be.Publish(ctx, "ahead", batch("a", 14, 4)))
	assert.Equal(t, int64(2), yields.Load(), "no yield once the group keeps up")
}

// However large MaxBacklog is, a publisher yields once the backlog is past
// yieldEntries entries (yieldEntriesOneProc on a single processor).
func TestAPublisherYieldsPastAThousandEntriesWhateverTheLimit(t *testing.T) {
	ctx := context.Background()
	be := newTestBackend(t, nil) // MaxBacklog 50,000: an eighth is 6,250
	yields := countYields(be)
	subscribeGroup(t, be, "many", "g")
	ahead := be.br.aheadMax
	want := yieldEntries
	if runtime.GOMAXPROCS(0) == 1 {
		want = yieldEntriesOneProc
	}
	require.Equal(t, want, ahead)
	for i := 0; i < ahead; i += 64 {
		require.NoError(t, be.Publish(ctx, "many", batch("m", i, 64)))
	}
	assert.Zero(t, yields.Load(), "%d entries are not past the cap", ahead)
	require.NoError(t, be.Publish(ctx, "many", batch("m", ahead, 1)))
	assert.Equal(t, int64(1), yields.Load(), "%d are", ahead+1)
}

// On a single processor the cap is yieldEntriesOneProc.
func TestAPublisherOnOneProcessorYieldsPastAQuarterOfTheCap(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	ctx := context.Background()
	be := newTestBackend(t, nil)
	yields := countYields(be)
	subscribeGroup(t, be, "one", "g")
	require.NoError(t, be.Publish(ctx, "one", batch("m", 0, yieldEntriesOneProc)))
	assert.Zero(t, yields.Load(), "%d entries are not past the cap", yieldEntriesOneProc)
	require.NoError(t, be.Publish(ctx, "one", batch("m", yieldEntriesOneProc, 1)))
	assert.Equal(t, int64(1), yields.Load(), "%d are", yieldEntriesOneProc+1)
}

// The byte limit counts as well: a few large messages past an eighth of
// MaxBacklogBytes make the publisher yield.
func TestAPublisherYieldsPastAnEighthOfTheByteLimit(t *testing.T) {
	ctx := context.Background()
	payload := bytes.Repeat([]byte{'p'}, 1000)
	size := int64(entryOverhead + len(payload) + len("b-0"))
	be := newTestBackend(t, &Options{MaxBacklog: 1000, MaxBacklogBytes: 8 * 2 * size}) // yields past 2 messages' bytes
	yields := countYields(be)
	subscribeGroup(t, be, "bytes", "g")

	msg := func(id string) []*backend.Message { return []*backend.Message{{ID: id, Payload: payload}} }
	require.NoError(t, be.Publish(ctx, "bytes", msg("b-0")))
	require.NoError(t, be.Publish(ctx, "bytes", msg("b-1")))
	assert.Zero(t, yields.Load(), "two messages' bytes are not past an eighth")
	require.NoError(t, be.Publish(ctx, "bytes", msg("b-2")))
	assert.Equal(t, int64(1), yields.Load(), "three are")
}

// A Publish that leaves its batch in the inbox, because a Receive or an
// Ack holds the log, yields too when it is ahead.
func TestAPublisherThatOffersItsBatchYieldsWhenAhead(t *testing.T) {
	be := newTestBackend(t, &Options{MaxBacklog: 80})
	yields := countYields(be)
	subscribeGroup(t, be, "offer", "g")
	tp := be.br.lookup("offer")

	publishWhileHeld(t, be, tp, batch("o", 0, 20))
	assert.True(t, tp.inboxFull.Load(), "the batch went to the inbox")
	assert.Equal(t, int64(1), yields.Load(), "20 entries are past an eighth of 80")
	tp.unlock()
}
