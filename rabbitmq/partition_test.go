package rabbitmq_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/internal/testkit/rabbittest"
	"github.com/eventbus-go/bus/rabbitmq"
)

// testFreshStreamsAtOnce: processes that record a fresh topic's
// partition count and a fresh group's heartbeats at the same moment all
// get their answer, and none loses its publishing connection. The
// broker answers a stream's declaration before the stream takes
// publishes: a record published in that window closes its channel, and
// at times the connection.
func testFreshStreamsAtOnce(t *testing.T, node *rabbittest.Node) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bs := make([]*rabbitmq.Backend, 3)
	conns := make([]any, len(bs))
	for i := range bs {
		bs[i] = openRabbit(ctx, t, node.URL())
		var err error
		conns[i], err = rabbitmq.PublishingConn(bs[i])
		require.NoError(t, err)
	}
	for r := range 10 {
		topic := fmt.Sprintf("fresh.streams.%d", r)
		var wg sync.WaitGroup
		counts, members := make([]int, len(bs)), make([][]string, len(bs))
		errs := make([]error, 2*len(bs))
		for i, b := range bs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				counts[i], errs[2*i] = b.Partitions(ctx, topic, 4)
				members[i], errs[2*i+1] = b.Heartbeat(ctx, topic, "g", fmt.Sprintf("m%d", i), time.Minute)
			}()
		}
		wg.Wait()
		for i := range bs {
			require.NoError(t, errs[2*i], "partitions of %s, backend %d", topic, i)
			require.NoError(t, errs[2*i+1], "heartbeat on %s, backend %d", topic, i)
			require.Equal(t, 4, counts[i], "partitions of %s, backend %d", topic, i)
			require.Contains(t, members[i], fmt.Sprintf("m%d", i), "members of %s, backend %d", topic, i)
		}
	}
	for i, b := range bs {
		now, err := rabbitmq.PublishingConn(b)
		require.NoError(t, err)
		require.True(t, now == conns[i], "backend %d dialed its publishing connection again", i)
	}
}
