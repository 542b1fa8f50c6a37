package brokers

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/internal/testkit/redistest"
)

// TestServerCPUReadsTheServersCPUTime checks the figure the Redis
// benchmarks report as srv-cpu-ns/msg: it is read from INFO CPU and grows
// while the server works.
func TestServerCPUReadsTheServersCPUTime(t *testing.T) {
	c := redis.NewClient(redistest.Options(t))
	defer c.Close()

	before, ok := serverCPU(c)
	require.True(t, ok, "INFO CPU gives used_cpu_sys and used_cpu_user")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	key := "bench-servercpu-" + time.Now().Format("150405.000000000")
	defer c.Del(context.Background(), key)
	// Work until the server's clock (microseconds) has moved.
	after := before
	for deadline := time.Now().Add(10 * time.Second); after <= before && time.Now().Before(deadline); {
		pipe := c.Pipeline()
		for range 500 {
			pipe.Incr(ctx, key)
		}
		_, err := pipe.Exec(ctx)
		require.NoError(t, err)
		after, ok = serverCPU(c)
		require.True(t, ok)
	}
	assert.Greater(t, after, before, "the server's CPU time grows while it works")
	assert.Positive(t, before, "a running server has used some CPU")
}
