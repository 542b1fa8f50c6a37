package peek_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/inmemory"
	"github.com/eventbus-go/bus/internal/peek"
)

func TestAllPagesThroughEveryMessageInOrderAndStopsWhenAsked(t *testing.T) {
	ctx := context.Background()
	be, err := inmemory.New(nil)
	require.NoError(t, err)
	b := bus.New(be)
	defer b.Close(ctx)
	var msgs []*bus.Message
	for i := range 10 {
		msgs = append(msgs, &bus.Message{Payload: fmt.Appendf(nil, "m%d", i)})
	}
	require.NoError(t, b.Publish(ctx, "t", msgs...))
	var got []string
	require.NoError(t, peek.All(ctx, be, "t", 3, func(m *backend.Message) bool {
		got = append(got, string(m.Payload))
		return true
	}))
	assert.Equal(t, []string{"m0", "m1", "m2", "m3", "m4", "m5", "m6", "m7", "m8", "m9"}, got, "every message, in order, over pages of 3")
	n := 0
	require.NoError(t, peek.All(ctx, be, "t", 3, func(*backend.Message) bool { n++; return n < 4 }))
	assert.Equal(t, 4, n, "it stops at the first false")
	err = peek.All(ctx, stuck{be}, "t", 3, func(*backend.Message) bool { return true })
	assert.ErrorContains(t, err, "did not advance", "a cursor that does not advance ends the scan")
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	err = peek.All(cancelled, be, "t", 3, func(*backend.Message) bool { return true })
	assert.ErrorIs(t, err, context.Canceled, "an ended ctx ends the scan")
}

// stuck is an inspector whose cursor never advances.
type stuck struct{ backend.Inspector }

func (s stuck) Peek(ctx context.Context, topic, cursor string, n int) ([]*backend.Message, string, error) {
	msgs, _, err := s.Inspector.Peek(ctx, topic, "", n)
	return msgs, "stuck", err
}
