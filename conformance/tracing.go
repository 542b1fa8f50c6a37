package conformance

import "testing"

// RunTracing checks that trace context flows from publisher to consumer.
func RunTracing(t *testing.T, newBackend NewBackend) {}
