package conformance_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/conformance"
	"github.com/eventbus-go/bus/inmemory"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func newInmemory(t testing.TB) backend.Backend {
	t.Helper()
	be, err := inmemory.New(nil)
	require.NoError(t, err, "inmemory.New with defaults")
	return be
}

// TestConformanceInmemory runs the suite on the reference backend, so a
// change to the suite is checked where it is made.
func TestConformanceInmemory(t *testing.T) {
	conformance.Run(t, newInmemory)
}

func BenchmarkConformanceInmemory(b *testing.B) {
	conformance.RunBenchmarks(b, newInmemory)
}
