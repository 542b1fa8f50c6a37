package inmemory_test

import (
	"testing"

	"github.com/eventbus-go/bus/conformance/tracing"
)

func TestConformanceTracing(t *testing.T) {
	tracing.Run(t, newConformanceBackend)
}
