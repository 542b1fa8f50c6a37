package gochan_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/internal/rawclient/gochan"
)

// The channel baseline copies what it is given, delivers it in order,
// and gives up on a full channel when ctx ends.
func TestChannelCopiesInOrderAndHonoursCtx(t *testing.T) {
	c := gochan.New(2)
	buf := []byte("a")
	require.NoError(t, c.Publish(context.Background(), [][]byte{buf, []byte("b")}))
	buf[0] = 'x' // the caller reuses its buffer

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	err := c.Publish(ctx, [][]byte{[]byte("c")})
	require.ErrorIs(t, err, context.DeadlineExceeded, "a full channel waits only while ctx lasts")

	stop := make(chan struct{})
	var got []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Consume(stop, func(p []byte) {
			got = append(got, string(p))
			if len(got) == 2 {
				close(stop)
			}
		})
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Consume did not return after stop")
	}
	assert.Equal(t, []string{"a", "b"}, got, "copies, in order")
}
