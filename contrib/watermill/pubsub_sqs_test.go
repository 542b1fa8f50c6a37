package watermill

import (
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"

	"github.com/eventbus-go/bus/internal/testkit/awstest"
	_ "github.com/eventbus-go/bus/sqs"
)

// TestWatermillUniversalSuiteOnSQS runs Watermill's universal suite on
// sqs:// against a private emulator, with the features of every backend
// (see features) but one: standard SQS queues do not keep publish order,
// even for a single subscriber, so GuaranteedOrderWithSingleSubscriber is
// off and the suite's order tests are skipped.
func TestWatermillUniversalSuiteOnSQS(t *testing.T) {
	awstest.SetDummyCredentials(t)
	b := openBus(t, awstest.Start(t).URL())
	f := features()
	f.GuaranteedOrderWithSingleSubscriber = false
	tests.TestPubSub(t, f,
		func(t *testing.T) (message.Publisher, message.Subscriber) {
			return newPubSub(t, b, "")
		},
		func(t *testing.T, group string) (message.Publisher, message.Subscriber) {
			return newPubSub(t, b, group)
		},
	)
}
