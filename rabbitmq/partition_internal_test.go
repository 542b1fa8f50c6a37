package rabbitmq

import (
	"context"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/internal/testkit/rabbittest"
)

// TestPartitionsRedialWhenTheSocketClosedUnderAWrite: when the streams
// connection's socket closes under a write before the client marks the
// connection closed (the client then returns the write's own error, not
// amqp.ErrClosed), a partition count is read on a new connection instead
// of failing the publish that asked for it.
func TestPartitionsRedialWhenTheSocketClosedUnderAWrite(t *testing.T) {
	node := rabbittest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	u, err := url.Parse(node.URL())
	require.NoError(t, err)
	b, err := OpenURL(ctx, u)
	require.NoError(t, err)
	defer b.Close()

	before, err := b.streams.get(ctx)
	require.NoError(t, err)
	b.streams.mu.Lock()
	sock := b.streams.sock
	b.streams.mu.Unlock()
	sock.mu.Lock()
	sock.err = &net.OpError{Op: "write", Net: "tcp", Err: net.ErrClosed} // every write fails so from now on
	sock.mu.Unlock()

	n, err := b.Partitions(ctx, "closed.under.write", 4)
	require.NoError(t, err, "the count is recorded and read on a new connection")
	assert.Equal(t, 4, n, "the count recorded")
	after, err := b.streams.get(ctx)
	require.NoError(t, err)
	assert.NotSame(t, before, after, "the streams connection was dialed again")
}
