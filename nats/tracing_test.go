package nats_test

import (
	"testing"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/conformance/tracing"
	"github.com/eventbus-go/bus/internal/testkit/natstest"
	busnats "github.com/eventbus-go/bus/nats"
)

func TestConformanceTracing(t *testing.T) {
	url := natstest.Start(t).URL()
	for _, tt := range []struct {
		name string
		opts busnats.Options
	}{
		{"JetStream", busnats.Options{}},
		{"Core", busnats.Options{CoreNATS: true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := isolated(t, url, tt.opts)
			tracing.Run(t, func(t testing.TB) backend.Backend { return connect(t, url, o) })
		})
	}
}
