package urlopt_test

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/eventbus-go/bus/internal/urlopt"
)

func TestExplainSaysWhatAFailedConnectionMeans(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	timeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	tests := []struct {
		name, protocol, host string
		err                  error
		want                 []string
	}{
		{"nothing listens", "Redis", "127.0.0.1:1", refused, []string{"nothing listens on 127.0.0.1:1", "Redis server running"}},
		{"a Redis port asked for NATS", "NATS", "127.0.0.1:6379", timeout, []string{"no NATS server answered", "port 6379 is usually Redis's"}},
		{"a NATS port asked for Redis", "Redis", "127.0.0.1:4222", errors.New(`redis: can't parse map reply: "INFO {}"`), []string{"does not speak Redis", "port 4222 is usually NATS's"}},
		{"a host that does not resolve", "Redis", "nosuch.invalid:6379", &net.DNSError{Err: "no such host", Name: "nosuch.invalid", IsNotFound: true}, []string{"cannot resolve the host"}},
	}
	for _, tt := range tests {
		err := urlopt.Explain(tt.err, tt.protocol, tt.host)
		for _, w := range tt.want {
			assert.Contains(t, err.Error(), w, "%s", tt.name)
		}
		assert.ErrorIs(t, err, tt.err, "%s: the cause is kept", tt.name)
	}
	other := fmt.Errorf("some other failure")
	assert.Equal(t, other, urlopt.Explain(other, "Redis", "h:1"), "nothing to add")
	assert.NoError(t, urlopt.Explain(nil, "Redis", "h:1"))
}

func TestMissingSchemeSuggestsTheURLAndNeverMasksAPort(t *testing.T) {
	schemes := []string{"mem", "nats", "redis"}
	tests := []struct{ raw, want string }{
		{"localhost:6379", `did you mean "redis://localhost:6379"`},
		{"127.0.0.1:4222", `did you mean "nats://127.0.0.1:4222"`},
		{"broker:9999", `"redis://broker:9999" or "nats://broker:9999"`},
	}
	for _, tt := range tests {
		err := urlopt.MissingScheme(tt.raw, schemes)
		assert.Contains(t, err.Error(), tt.want, "%s", tt.raw)
		assert.Contains(t, err.Error(), tt.raw, "the port is shown, not masked")
	}
	mistyped := []struct{ raw, want string }{
		{"redis//127.0.0.1:6379", `did you mean "redis://127.0.0.1:6379"`},
		{"redis:127.0.0.1:6379", `did you mean "redis://127.0.0.1:6379"`},
		{"redis:/127.0.0.1:6379", `did you mean "redis://127.0.0.1:6379"`},
		{"rediss//cache:6380", `did you mean "rediss://cache:6380"`},
		{"nats//127.0.0.1:4222", `did you mean "nats://127.0.0.1:4222"`},
		{"postgres//db.internal/orders", `did you mean "postgres://db.internal/orders"`},
	}
	for _, tt := range mistyped {
		err := urlopt.MissingScheme(tt.raw, schemes)
		assert.Contains(t, err.Error(), tt.want, "%s", tt.raw)
		assert.Contains(t, err.Error(), `is not followed by "://"`, "%s: the error names the mistake", tt.raw)
		assert.NotContains(t, err.Error(), "nats://redis", "%s: the scheme typed is kept", tt.raw)
		assert.NotContains(t, err.Error(), "redis://redis", "%s: the scheme is not repeated", tt.raw)
	}
	err := urlopt.MissingScheme("redis:user:secret@host:6379", schemes)
	assert.NotContains(t, err.Error(), "secret", "credentials are never shown")
	assert.Contains(t, err.Error(), "redis://[user:password@]host:port", "the fix is shown without the credentials")
	err = urlopt.MissingScheme("user:secret@host:6379", schemes)
	assert.NotContains(t, err.Error(), "secret", "credentials are never shown")
}
