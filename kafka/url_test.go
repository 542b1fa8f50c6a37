package kafka

import (
	"context"
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
)

func TestParseURLReadsEveryParameter(t *testing.T) {
	u, err := url.Parse("kafka://alice:s3cret@h1:9092,h2:9093?tls=true&tls_server_name=kafka.example&sasl=scram-sha-512" +
		"&client_id=app&dial_timeout=3s&request_timeout=4s&session_timeout=7s&close_timeout=1s&partitions=6")
	require.NoError(t, err)
	o, err := parseURL(u)
	require.NoError(t, err)
	assert.Equal(t, []string{"h1:9092", "h2:9093"}, o.Seeds, "every host is a seed broker")
	assert.Equal(t, "alice", o.User)
	assert.Equal(t, "s3cret", o.Password)
	require.NotNil(t, o.TLS, "tls=true sets a TLS configuration")
	assert.Equal(t, "kafka.example", o.TLS.ServerName)
	assert.Equal(t, "scram-sha-512", o.SASL)
	assert.Equal(t, "app", o.ClientID)
	assert.Equal(t, 3*time.Second, o.DialTimeout)
	assert.Equal(t, 4*time.Second, o.RequestTimeout)
	assert.Equal(t, 7*time.Second, o.SessionTimeout)
	assert.Equal(t, time.Second, o.CloseTimeout)
	assert.Equal(t, 6, o.Partitions)
}

func TestBadURLRefusedBeforeIO(t *testing.T) {
	tests := []struct{ name, url string }{
		{"unknown parameter", "kafka://127.0.0.1:1?colour=blue"},
		{"no port", "kafka://127.0.0.1"},
		{"path", "kafka://127.0.0.1:1/topic"},
		{"unknown sasl", "kafka://u:p@127.0.0.1:1?sasl=gssapi"},
		{"user without sasl", "kafka://u:p@127.0.0.1:1"},
		{"sasl without user", "kafka://127.0.0.1:1?sasl=plain"},
		{"server name without tls", "kafka://127.0.0.1:1?tls_server_name=x"},
		{"tiny session", "kafka://127.0.0.1:1?session_timeout=10ms"},
		{"partitions 0", "kafka://127.0.0.1:1?partitions=0"},
		{"no host", "kafka://?partitions=1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u, err := url.Parse(tt.url)
			require.NoError(t, err)
			// A context already ended: any I/O would fail with its error.
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			_, err = OpenURL(ctx, u)
			require.Error(t, err)
			assert.True(t, errors.Is(err, backend.ErrInvalidOption), "want ErrInvalidOption, got %v", err)
			assert.NotContains(t, err.Error(), "s3cret")
		})
	}
}

func TestOpenReturnsByCtxOnADeadNetwork(t *testing.T) {
	u, err := url.Parse("kafka://127.0.0.1:1?dial_timeout=100ms")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = OpenURL(ctx, u)
	require.Error(t, err, "nothing listens on port 1")
	assert.Less(t, time.Since(start), 3*time.Second, "Open returns by its ctx")
}

func TestCommitMetadataRoundTrip(t *testing.T) {
	done := map[int64]bool{12: true, 13: true, 14: true, 20: true}
	due := map[int64]int64{11: 1_700_000_000_123}
	att := map[int64]int{10: 2, 11: 3}
	m := decodeMeta(10, encodeMeta(10, done, due, att))
	assert.Equal(t, done, m.done)
	assert.Equal(t, due, m.due)
	assert.Equal(t, att, m.attempts)
	assert.Empty(t, decodeMeta(10, "member-1").done, "metadata of another writer reads as none")
}

func TestCommitMetadataStaysWithinTheLimit(t *testing.T) {
	done := map[int64]bool{}
	for i := int64(0); i < 5000; i += 2 {
		done[i] = true
	}
	s := encodeMeta(0, done, nil, nil)
	assert.LessOrEqual(t, len(s), metaLimit)
	m := decodeMeta(0, s)
	assert.NotEmpty(t, m.done)
	for off := range m.done {
		assert.True(t, done[off], "only settled offsets are read back")
	}
}

func TestKafkaTopicNames(t *testing.T) {
	assert.Equal(t, "orders.v1_a-b", kafkaTopic("orders.v1_a-b"), "a name Kafka allows is kept")
	assert.Regexp(t, `^bus\.h\.[0-9a-f]{64}$`, kafkaTopic("a:b"), "a name with ':' is hashed")
	assert.NotEqual(t, kafkaTopic("a:b"), kafkaTopic("a:c"))
}
