package sqs

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A request whose connection closed under it is repeated once, at once;
// no other failure is repeated, and a release's SendMessageBatch never is.
func TestRetryerRepeatsOnlyAClosedConnection(t *testing.T) {
	r := newRetryer()
	assert.Equal(t, 2, r.MaxAttempts(), "one repeat at most")
	closed := &smithy.DeserializationError{Err: &net.OpError{Op: "read", Net: "tcp", Err: net.ErrClosed}}
	assert.True(t, r.IsErrorRetryable(closed), "the connection closed while the answer was read")
	delay, err := r.RetryDelay(1, closed)
	require.NoError(t, err)
	assert.Zero(t, delay, "the repeat is at once")
	for _, err := range []error{
		errors.New("connection reset by peer"),
		&net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")},
		context.DeadlineExceeded,
		&smithy.GenericAPIError{Code: "InternalError"},
		&smithy.GenericAPIError{Code: "Throttling"},
	} {
		assert.False(t, r.IsErrorRetryable(err), "%v is not repeated", err)
	}
	for range 100 { // the SDK's retry quota does not stop the repeats
		release, err := r.GetRetryToken(context.Background(), closed)
		require.NoError(t, err)
		require.NoError(t, release(errors.New("failed again")))
	}

	var o sqs.Options
	o.Retryer = r
	noRepeat(&o)
	assert.Equal(t, 1, o.Retryer.MaxAttempts(), "a release's copies are sent once")

	b, err := New(context.Background(), &Options{Region: "eu-west-1", Endpoint: "http://127.0.0.1:1", CloseTimeout: time.Second})
	require.NoError(t, err)
	defer b.Close()
	assert.Equal(t, 2, b.sqs.Options().Retryer.MaxAttempts(), "SQS requests use the retryer")
	assert.Equal(t, 2, b.sns.Options().Retryer.MaxAttempts(), "SNS requests use the retryer")
}
