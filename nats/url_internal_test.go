package nats

import (
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseURLRefusesBadURLsWithoutTheSecret(t *testing.T) {
	t.Parallel()
	const secret = "s3cretT0ken"
	tests := []struct{ name, raw string }{
		{"opaque", "nats:user:" + secret + "@h"},
		{"opaque token", "nats:" + secret + "@h"},
		{"no host", "nats://" + secret + "@"},
		{"path", "nats://" + secret + "@h/x"},
		{"other scheme", "http://" + secret + "@h"},
		{"repeated parameter", "nats://" + secret + "@h?prefix=a&prefix=b"},
		{"unknown parameter", "nats://" + secret + "@h?colour=blue"},
		{"prefix with NUL", "nats://" + secret + "@h?prefix=a%00b"},
		{"prefix with SOH", "nats://" + secret + "@h?prefix=a%01b"},
		{"prefix with DEL", "nats://" + secret + "@h?prefix=a%7Fb"},
		{"prefix with a space", "nats://" + secret + "@h?prefix=a%20b"},
		{"non-ASCII prefix", "nats://" + secret + "@h?prefix=caf%C3%A9"},
		{"prefix with an empty token", "nats://" + secret + "@h?prefix=a..b"},
		{"prefix with a wildcard", "nats://" + secret + "@h?prefix=a.>"},
		{"zero publish window", "nats://" + secret + "@h?publish_window=0"},
		{"zero duration", "nats://" + secret + "@h?reconnect_wait=0s"},
	}
	for _, tt := range tests {
		u, err := url.Parse(tt.raw)
		require.NoError(t, err, tt.name)
		_, _, _, err = parseURL(u, nil)
		require.ErrorIs(t, err, ErrInvalidOption, tt.name)
		assert.NotContains(t, err.Error(), secret, "%s: the token is not in the error", tt.name)
	}
}

func TestParseURLStripsQueryAndKeepsCredentialsForTheDial(t *testing.T) {
	t.Parallel()
	u, err := url.Parse("nats+tls://tok@h:4222/?prefix=app.v1&publish_window=8")
	require.NoError(t, err)
	o, server, secure, err := parseURL(u, nil)
	require.NoError(t, err)
	assert.True(t, secure, "nats+tls:// asks for TLS")
	assert.Equal(t, "tls://tok@h:4222", server.String(), "the dialled URL keeps the token, drops query and path")
	assert.Equal(t, "app.v1", o.SubjectPrefix)
	assert.Equal(t, 8, o.PublishWindow)
	assert.False(t, strings.Contains(redacted(u), "tok@"), "the redacted URL masks the token: %s", redacted(u))
}
