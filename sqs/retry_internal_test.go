package sqs

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"testing/iotest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/sdkhttp"
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
	_, ok := b.sns.Options().HTTPClient.(sdkhttp.Client)
	assert.True(t, ok, "requests go through sdkhttp.Client")
}

// lostAnswer answers every request 200 with a body whose read fails as
// when the connection closes under it, and counts the requests.
type lostAnswer struct{ calls atomic.Int32 }

func (l *lostAnswer) Do(*http.Request) (*http.Response, error) {
	l.calls.Add(1)
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: io.NopCloser(iotest.ErrReader(&net.OpError{Op: "read", Net: "tcp", Err: net.ErrClosed}))}, nil
}

// A publish whose answer is lost is not repeated (the backend contract:
// Publish must not retry); its messages fail, and may have been stored.
func TestPublishWhoseAnswerIsLostIsNotRepeated(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := New(ctx, &Options{Region: "eu-west-1", Endpoint: "http://127.0.0.1:1", CloseTimeout: time.Second})
	require.NoError(t, err)
	defer b.Close()
	b.topics["t"] = "arn:aws:sns:eu-west-1:000000000000:t" // no CreateTopic
	l := &lostAnswer{}
	b.sns = sns.New(b.sns.Options(), func(o *sns.Options) { o.HTTPClient = l })
	err = b.Publish(ctx, "t", []*backend.Message{{ID: "m1", Payload: []byte("x")}, {ID: "m2", Payload: []byte("y")}})
	require.ErrorIs(t, err, net.ErrClosed, "the publish fails with what happened")
	assert.Equal(t, int32(1), l.calls.Load(), "PublishBatch is sent once")

	l.calls.Store(0)
	_, err = b.sns.ListTopics(ctx, &sns.ListTopicsInput{})
	require.ErrorIs(t, err, net.ErrClosed)
	assert.Equal(t, int32(2), l.calls.Load(), "another SNS request is repeated once")
}
