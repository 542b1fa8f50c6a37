package conformance

import (
	"testing"

	"github.com/eventbus-go/bus/backend"
)

// NewBackend returns a fresh backend for one case. The suite closes it
// (through bus.Close) when the case ends.
type NewBackend func(t testing.TB) backend.Backend

// Run runs every case that the backend's Capabilities allow.
func Run(t *testing.T, newBackend NewBackend) {
	t.Helper()
	t.Run("Tracing", func(t *testing.T) { RunTracing(t, newBackend) })
}

// RunBenchmarks runs the portable benchmarks against the backend.
func RunBenchmarks(b *testing.B, newBackend NewBackend) {}
