package brokers

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/eventbus-go/bus/internal/testkit/natstest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, natstest.LeakIgnores()...)
}
