package redisstream_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/conformance/tracing"
	"github.com/eventbus-go/bus/internal/testkit/redistest"
)

func TestConformanceTracing(t *testing.T) {
	opts := redistest.Options(t)
	tracing.Run(t, func(t testing.TB) backend.Backend {
		return newBackend(t, redis.NewClient(opts), nil)
	})
}
