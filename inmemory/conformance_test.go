package inmemory_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/conformance"
	"github.com/eventbus-go/bus/inmemory"
)

// newConformanceBackend returns a private broker per case; the suite
// closes it through bus.Close.
func newConformanceBackend(t testing.TB) backend.Backend {
	t.Helper()
	be, err := inmemory.New(nil)
	require.NoError(t, err, "inmemory.New with defaults")
	return be
}

func TestConformance(t *testing.T) {
	conformance.Run(t, newConformanceBackend)
}

func BenchmarkConformance(b *testing.B) {
	conformance.RunBenchmarks(b, newConformanceBackend)
}
