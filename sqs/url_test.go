package sqs

import (
	"context"
	"encoding/base64"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
)

func TestParseURLReadsEveryParameter(t *testing.T) {
	u, err := url.Parse("sqs://eu-west-1?endpoint=http://127.0.0.1:4566&prefix=app-&close_timeout=3s&request_timeout=45s&fifo=true")
	require.NoError(t, err)
	o, err := parseURL(u)
	require.NoError(t, err)
	assert.Equal(t, &Options{Region: "eu-west-1", Endpoint: "http://127.0.0.1:4566", Prefix: "app-", CloseTimeout: 3 * time.Second, RequestTimeout: 45 * time.Second, FIFO: true}, o)
}

func TestParseURLRefusesBadInputBeforeIO(t *testing.T) {
	tests := []struct {
		name, url, want string
	}{
		{"credentials in the URL", "sqs://key:secret@eu-west-1", "no credentials"},
		{"a port", "sqs://eu-west-1:443", "without a port"},
		{"a path", "sqs://eu-west-1/queue", "no path"},
		{"no region", "sqs://?endpoint=http://127.0.0.1:1", "no host"},
		{"a bad region name", "sqs://eu_west-1", "not an AWS region"},
		{"an endpoint without a scheme", "sqs://eu-west-1?endpoint=127.0.0.1:4566", "endpoint"},
		{"an endpoint with credentials", "sqs://eu-west-1?endpoint=http://a:b@127.0.0.1:4566", "endpoint"},
		{"a bad prefix", "sqs://eu-west-1?prefix=a.b", "prefix"},
		{"an unknown parameter", "sqs://eu-west-1?lifo=true", "lifo"},
		{"a fifo that is not a boolean", "sqs://eu-west-1?fifo=maybe", "fifo"},
		{"a short close timeout", "sqs://eu-west-1?close_timeout=1ms", "close timeout"},
		{"a short request timeout", "sqs://eu-west-1?request_timeout=1s", "request timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u, err := url.Parse(tt.url)
			require.NoError(t, err)
			_, err = parseURL(u)
			require.Error(t, err, "%s is refused", tt.url)
			assert.True(t, errors.Is(err, backend.ErrInvalidOption), "the error wraps ErrInvalidOption: %v", err)
			assert.Contains(t, err.Error(), tt.want, "the error names the problem")
			assert.NotContains(t, err.Error(), "secret", "no credential in the error")
		})
	}
}

func TestOpenURLDoesNoIO(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	u, err := url.Parse("sqs://us-east-1?endpoint=http://127.0.0.1:1")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	b, err := OpenURL(ctx, u)
	require.NoError(t, err, "opening reaches no endpoint, so a closed port is no error")
	assert.Equal(t, "sqs", b.Capabilities().Name)
	require.NoError(t, b.Close())
	err = b.Publish(ctx, "t", []*backend.Message{{ID: "1", Payload: []byte("x")}})
	assert.ErrorIs(t, err, backend.ErrClosed, "Publish after Close")
}

func TestNamesAreValidAndDistinct(t *testing.T) {
	long := strings.Repeat("a", 300)
	tests := []struct {
		name string
		got  string
		max  int
	}{
		{"plain topic", topicName("", "orders", false), maxTopicName},
		{"dotted topic", topicName("", "orders.created", false), maxTopicName},
		{"long topic", topicName("p-", long, false), maxTopicName},
		{"queue", queueName("", "orders", "billing", false), maxQueueName},
		{"long queue", queueName("", long, long, false), maxQueueName},
		{"fifo queue", queueName("", long, "g", true), maxQueueName},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.LessOrEqual(t, len(tt.got), tt.max, "%q fits AWS's limit", tt.got)
			assert.Regexp(t, `^[A-Za-z0-9_-]+(\.fifo)?$`, tt.got, "only characters AWS takes")
		})
	}
	assert.Equal(t, "orders", topicName("", "orders", false), "a valid name is kept")
	assert.NotEqual(t, topicName("", "a.b", false), topicName("", "a_b", false), "names that map alike differ by their hash")
	assert.True(t, strings.HasSuffix(queueName("", "t", "g", true), ".fifo"))
}

func TestCodecRoundTripsEveryByte(t *testing.T) {
	payloads := [][]byte{
		{},
		[]byte("plain text\twith tab\nand newline é ☃"),
		[]byte("carriage\r\nreturn"),
		{0, 1, 2, 0xff, 0xfe},
		[]byte("\uFFFE"),
		[]byte(" leading and trailing spaces "),
	}
	for i, p := range payloads {
		m := &backend.Message{ID: "id-" + string(rune('a'+i)), Key: "k\x00ey", Headers: map[string]string{"h": "v\r\n", "empty": ""}, Payload: p, PublishedAt: time.Unix(0, 1234567890123)}
		e := encode(m)
		var got backend.Message
		require.NoError(t, decode(e.envelope, e.body, &got), "payload %d decodes", i)
		assert.Equal(t, m.ID, got.ID)
		assert.Equal(t, m.Key, got.Key)
		assert.Equal(t, m.Headers, got.Headers)
		assert.Equal(t, p, got.Payload, "payload %d byte-exact", i)
		assert.True(t, m.PublishedAt.Equal(got.PublishedAt), "publish time kept")
		assert.NotEmpty(t, e.body, "SNS refuses an empty body")
	}
}

func TestDecodeRefusesMalformedEnvelopes(t *testing.T) {
	good := encode(&backend.Message{ID: "x", Payload: []byte("p")})
	for _, env := range []string{"", "not base64!", "AA==", good.envelope[:len(good.envelope)-4]} {
		var m backend.Message
		assert.ErrorIs(t, decode(env, good.body, &m), errMalformed, "envelope %q is refused", env)
	}
}

func TestBatchesKeepSNSLimits(t *testing.T) {
	big := encoded{body: strings.Repeat("x", 100<<10)}
	small := encoded{body: "x"}
	got := batches([]encoded{small, small, small, small, small, small, small, small, small, small, small, big, big, big})
	assert.Equal(t, []span{{0, 10}, {10, 13}, {13, 14}}, got, "ten entries and 256 KiB a call")
}

// TestLargestMessageFitsSNS proves the payload limit: a message at every
// bound of the content rule, with a payload of MaxPayload bytes that
// travels in base64, fits SNS's 256 KiB.
func TestLargestMessageFitsSNS(t *testing.T) {
	headers := map[string]string{}
	per := backend.MaxHeaderBytes / backend.MaxHeaders
	for i := range backend.MaxHeaders {
		k := strings.Repeat(string(rune('a'+i%26)), 8) + strings.Repeat("0", 2) + string(rune('A'+i/26))
		headers[k] = strings.Repeat("v", per-len(k))
	}
	m := &backend.Message{
		ID:          strings.Repeat("i", backend.MaxIDLen),
		Key:         strings.Repeat("k", backend.MaxKeyLen),
		Headers:     headers,
		Payload:     make([]byte, maxPayload), // zero bytes: not text, so base64
		PublishedAt: time.Now(),
	}
	e := encode(m)
	raw, err := base64.StdEncoding.DecodeString(e.envelope)
	require.NoError(t, err)
	assert.LessOrEqual(t, len(raw), envelopeRoom, "the envelope of the largest message fits its room")
	assert.LessOrEqual(t, e.size(), maxMessageBytes, "the largest message fits SNS's 256 KiB")
}
