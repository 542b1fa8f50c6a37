package nats

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSettledRetriesNoRespondersUntilAnswered(t *testing.T) {
	calls := 0
	err := settled(context.Background(), func() error {
		calls++
		switch calls {
		case 1:
			return natsgo.ErrNoResponders
		case 2:
			return jetstream.ErrNoStreamResponse
		}
		return jetstream.ErrKeyNotFound
	})
	require.ErrorIs(t, err, jetstream.ErrKeyNotFound, "the first answer that is not no-responders is returned")
	assert.Equal(t, 3, calls)

	other := errors.New("other")
	calls = 0
	err = settled(context.Background(), func() error { calls++; return other })
	assert.ErrorIs(t, err, other)
	assert.Equal(t, 1, calls, "other errors are not retried")
}

func TestSettledRetriesAStreamCreateTheServerFailed(t *testing.T) {
	failed := fmt.Errorf("bucket %q: %w", "b", &jetstream.APIError{Code: 500, ErrorCode: 10049, Description: "error creating store for stream"})
	calls := 0
	err := settled(context.Background(), func() error {
		if calls++; calls == 1 {
			return failed
		}
		return nil
	})
	require.NoError(t, err, "the second try's answer is returned")
	assert.Equal(t, 2, calls)

	refused := &jetstream.APIError{Code: 400, ErrorCode: 10058, Description: "stream name already in use with a different configuration"}
	calls = 0
	err = settled(context.Background(), func() error { calls++; return refused })
	assert.ErrorIs(t, err, refused)
	assert.Equal(t, 1, calls, "a refused configuration is not retried")
}

func TestSettledReturnsByTheDeadline(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := settled(ctx, func() error { return natsgo.ErrNoResponders })
	assert.ErrorIs(t, err, natsgo.ErrNoResponders)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, time.Since(start), time.Second, "returns by the ctx's deadline")
}

func TestMemberListExpiresAndEncodesSorted(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	ms := memberList{"b": now.Add(time.Second), "a": now.Add(2 * time.Second), "gone": now}
	assert.Equal(t, []string{"a", "b"}, ms.live(now), "live members, sorted; one whose time is now is gone")
	assert.Equal(t, "a 1002000\nb 1001000\n", string(ms.without(now).encode()))
}
