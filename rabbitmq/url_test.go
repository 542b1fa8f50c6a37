package rabbitmq_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/rabbitmq"
)

func TestOpenURLRefusesBadParametersBeforeAnyIO(t *testing.T) {
	tests := []struct {
		name, url, want string
	}{
		{"unknown parameter", "amqp://u:secretpw@127.0.0.1:1/?prefetch=5", "unknown parameter"},
		{"bad duration", "amqp://u:secretpw@127.0.0.1:1/?heartbeat=soon", "heartbeat"},
		{"heartbeat below a second", "amqp://u:secretpw@127.0.0.1:1/?heartbeat=10ms", "heartbeat"},
		{"bad prefix", "amqp://u:secretpw@127.0.0.1:1/?prefix=a%20b", "prefix"},
		{"repeated parameter", "amqp://u:secretpw@127.0.0.1:1/?heartbeat=2s&heartbeat=3s", "given 2 times"},
		{"no host", "amqp:///vhost", "no host"},
	}
	for _, tt := range tests {
		u, err := url.Parse(tt.url)
		require.NoError(t, err, tt.name)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		start := time.Now()
		_, err = rabbitmq.OpenURL(ctx, u)
		cancel()
		require.ErrorIs(t, err, backend.ErrInvalidOption, "%s: refused as an invalid option", tt.name)
		assert.Contains(t, err.Error(), tt.want, tt.name)
		assert.NotContains(t, err.Error(), "secretpw", "%s: the password is masked", tt.name)
		assert.Less(t, time.Since(start), 500*time.Millisecond, "%s: refused before dialing", tt.name)
	}
}

func TestOpenURLMasksThePasswordOfAFailedDial(t *testing.T) {
	u, err := url.Parse("amqp://u:secretpw@127.0.0.1:1/")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err = rabbitmq.OpenURL(ctx, u)
	require.Error(t, err, "nothing listens on port 1")
	assert.Contains(t, err.Error(), "nothing listens", "the error says what failed")
	assert.NotContains(t, err.Error(), "secretpw", "the password is masked")
}
