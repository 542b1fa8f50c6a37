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

// TestMeasureCrash measures a kill of a key-ordered member with the
// default ack timeout (only with BUS_MEASURE_CRASH set).
func TestMeasureCrash(t *testing.T) {
	t.Run("Locked", func(t *testing.T) { conformance.MeasureCrash(t, newConformanceBackend, 1) })
	t.Run("Partitioned", func(t *testing.T) { conformance.MeasureCrash(t, newConformanceBackend, 4) })
}

func BenchmarkConformance(b *testing.B) {
	conformance.RunBenchmarks(b, newConformanceBackend)
}
