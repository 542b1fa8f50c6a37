package nats_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/internal/testkit/faultproxy"
	"github.com/eventbus-go/bus/internal/testkit/natstest"
	busnats "github.com/eventbus-go/bus/nats"
)

// A Ping whose ctx has no deadline waits for the PONG at most
// Options.PublishTimeout, also over a dead network.
func TestPingWithoutDeadlineIsBoundedByPublishTimeout(t *testing.T) {
	srv := natstest.Start(t)
	p, err := faultproxy.New(strings.TrimPrefix(srv.URL(), "nats://"))
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, p.Close()) })
	const bound = 300 * time.Millisecond
	be := connect(t, "nats://"+p.Addr(), busnats.Options{PublishTimeout: bound, ReconnectWait: 50 * time.Millisecond})
	t.Cleanup(func() { assert.NoError(t, be.Close()) })
	require.NoError(t, be.Ping(context.Background()), "the server answers")

	p.Blackhole(true)
	defer p.Blackhole(false)
	start := time.Now()
	err = be.Ping(context.Background())
	took := time.Since(start)
	require.ErrorIs(t, err, context.DeadlineExceeded, "no PONG within PublishTimeout")
	assert.Less(t, took, bound+time.Second, "the ping ends at PublishTimeout")
	assert.GreaterOrEqual(t, took, bound, "the ping waits the whole PublishTimeout")
}
