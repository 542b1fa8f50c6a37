package watermill

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/eventbus-go/bus/internal/testkit/natstest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, append(natstest.LeakIgnores(),
		// Sarama (under watermill-kafka, a peer of the benchmark) starts
		// one process-wide metrics ticker that it never stops.
		goleak.IgnoreAnyFunction("github.com/rcrowley/go-metrics.(*meterArbiter).tick"),
	)...)
}
