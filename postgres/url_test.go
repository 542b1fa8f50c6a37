package postgres_test

import (
	"context"
	"errors"
	"net"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/postgres"
)

// closedPort returns a loopback address where nothing listens.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// TestOpenURLRefusesBadURLsBeforeIO: every bad URL gets its own error,
// which wraps ErrInvalidOption, masks the password and nothing else, and
// comes before any I/O: the URLs point to a closed port, where a dial
// would fail with another error.
func TestOpenURLRefusesBadURLsBeforeIO(t *testing.T) {
	addr := closedPort(t)
	tests := []struct{ name, url, want string }{
		{"no database", "postgres://u:pw@" + addr + "/",
			`postgres: open "postgres://u:xxxxx@` + addr + `/": invalid option: the URL names no database (postgres://host:5432/database): libpq's default is never assumed`},
		{"no database nor path", "postgres://u@" + addr,
			`postgres: open "postgres://u@` + addr + `": invalid option: the URL names no database (postgres://host:5432/database): libpq's default is never assumed`},
		{"no host", "postgres:///app",
			`postgres: open "postgres:///app": invalid option: the URL names no host (postgres://host:5432/database; a Unix socket's directory goes in ?host=): libpq's default is never assumed`},
		{"no host with credentials", "postgresql://u:pw@/app",
			`postgres: open "postgresql://u:xxxxx@/app": invalid option: the URL names no host (postgres://host:5432/database; a Unix socket's directory goes in ?host=): libpq's default is never assumed`},
		{"unknown parameter", "postgres://u:pw@" + addr + "/app?blok=1s",
			`postgres: open "postgres://u:xxxxx@` + addr + `/app?blok=1s": invalid option: unknown parameter(s) ["blok"] (known: `},
		{"pool_max_conns not a number", "postgres://u:pw@" + addr + "/app?pool_max_conns=abc",
			`postgres: open "postgres://u:xxxxx@` + addr + `/app?pool_max_conns=abc": invalid option: pool_max_conns="abc": want an integer from 1 to 65536`},
		{"pool duration", "postgres://u:pw@" + addr + "/app?pool_max_conn_lifetime=forever",
			`postgres: open "postgres://u:xxxxx@` + addr + `/app?pool_max_conn_lifetime=forever": invalid option: pool_max_conn_lifetime="forever": want a duration of at least 1ns, such as 30s`},
		{"connect_timeout not seconds", "postgres://u:pw@" + addr + "/app?connect_timeout=5s",
			`postgres: open "postgres://u:xxxxx@` + addr + `/app?connect_timeout=5s": invalid option: connect_timeout="5s": want an integer from 0 to 86400`},
		{"sslmode", "postgres://u:pw@" + addr + "/app?sslmode=maybe",
			`postgres: open "postgres://u:xxxxx@` + addr + `/app?sslmode=maybe": invalid option: sslmode="maybe": want one of disable, allow, prefer, require, verify-ca, verify-full`},
		{"opaque", "postgres:u:pw@" + addr + "/app",
			`postgres: open: invalid option: "postgres:xxxxx" is not of the form postgres://...: a URL without "//" is refused, so that credentials in it are never taken for a host`},
		{"unknown retention", "postgres://u@" + addr + "/db?retention=sometimes",
			`postgres: open "postgres://u@` + addr + `/db?retention=sometimes": invalid option: retention="sometimes": want one of settled, all`},
		{"repeated parameter", "postgres://u:pw@" + addr + "/db?block=1s&block=2s",
			`postgres: open "postgres://u:xxxxx@` + addr + `/db?block=1s&block=2s": invalid option: parameter "block" given 2 times`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u, err := url.Parse(tt.url)
			require.NoError(t, err)
			_, err = postgres.OpenURL(context.Background(), u)
			require.ErrorIs(t, err, bus.ErrInvalidOption)
			if tt.name == "unknown parameter" {
				assert.Contains(t, err.Error(), tt.want)
				assert.Contains(t, err.Error(), "pool_max_conns", "the known parameters are listed")
			} else {
				assert.Equal(t, tt.want, err.Error())
			}
			assert.NotContains(t, err.Error(), ":pw@", "the password is masked")
		})
	}
}

// TestOpenURLAcceptsDocumentedParameters: the documented connection,
// pool and pass-through parameters pass the check; the open then fails
// at the closed port (a dial, not a refusal).
func TestOpenURLAcceptsDocumentedParameters(t *testing.T) {
	addr := closedPort(t)
	for _, q := range []string{
		"sslmode=disable&application_name=svc&pool_max_conns=4&connect_timeout=2",
		"options=-c%20search_path%3Dapp&statement_cache_capacity=16&default_query_exec_mode=exec",
		"pool_max_conn_lifetime=1h&pool_health_check_period=30s&target_session_attrs=read-write",
		"block=500ms&dedup_window=0&retention=all&migrate=false",
	} {
		u, err := url.Parse("postgres://u:pw@" + addr + "/app?" + q)
		require.NoError(t, err)
		_, err = postgres.OpenURL(context.Background(), u)
		require.Error(t, err, q)
		assert.NotErrorIs(t, err, bus.ErrInvalidOption, "%s: accepted, then the dial fails", q)
		assert.Contains(t, err.Error(), `"postgres://u:xxxxx@`+addr+`/app?`, "the database is shown, the password masked")
	}
	u, err := url.Parse("postgres:///app?host=/nonexistent&port=1")
	require.NoError(t, err)
	_, err = postgres.OpenURL(context.Background(), u)
	assert.NotErrorIs(t, err, bus.ErrInvalidOption, "a Unix socket directory in ?host= names the host")
}

// TestOpenURLConnectTimeout: a server that accepts the connection and
// never answers fails the open within connect_timeout, under a ctx
// without a deadline; without connect_timeout, DefaultConnectTimeout
// applies.
func TestOpenURLConnectTimeout(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var accepted atomic.Int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				_ = c.Close()
			}
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			conns = append(conns, c) // held open, never answered
		}
	}()
	defer func() {
		_ = l.Close()
		<-done
	}()
	u, err := url.Parse("postgres://u:pw@" + l.Addr().String() + "/app?sslmode=disable&connect_timeout=1")
	require.NoError(t, err)
	start := time.Now()
	_, err = postgres.OpenURL(context.Background(), u)
	took := time.Since(start)
	require.Error(t, err)
	assert.False(t, errors.Is(err, bus.ErrInvalidOption), "a timeout, not a refusal: %v", err)
	assert.Contains(t, err.Error(), "connect_timeout 1s")
	assert.Positive(t, accepted.Load(), "the server was reached")
	assert.GreaterOrEqual(t, took, 900*time.Millisecond)
	assert.Less(t, took, 5*time.Second, "the open returns within connect_timeout")

	u, err = url.Parse("postgres://u:pw@" + l.Addr().String() + "/app")
	require.NoError(t, err)
	d, err := postgres.ConnectTimeoutOf(u)
	require.NoError(t, err)
	assert.Equal(t, postgres.DefaultConnectTimeout, d, "the default applies")
	assert.Equal(t, 10*time.Second, postgres.DefaultConnectTimeout, "the figure docs/backends.md gives")
	u.RawQuery = "connect_timeout=0"
	d, err = postgres.ConnectTimeoutOf(u)
	require.NoError(t, err)
	assert.Zero(t, d, "connect_timeout=0: none but the ctx")
}
