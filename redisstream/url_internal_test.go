package redisstream

import (
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
)

func TestParseURLPassesValidatedClientParameters(t *testing.T) {
	t.Parallel()
	u, err := url.Parse("rediss://default:pw@h:6390/2?pool_size=10&read_timeout=-1&dial_timeout=2s&max_retries=-1&protocol=2&prefix=app&block=250ms&read_linger=1ms")
	require.NoError(t, err)
	pu, err := parseURL(u)
	require.NoError(t, err)
	require.NotNil(t, pu.single, "a single-node client without cluster=true")
	o := pu.single
	assert.True(t, o.ContextTimeoutEnabled, "the client honours ctx deadlines")
	assert.Equal(t, "h:6390", o.Addr)
	assert.Equal(t, 2, o.DB)
	assert.NotNil(t, o.TLSConfig, "rediss:// uses TLS")
	assert.Equal(t, 10, o.PoolSize)
	assert.Equal(t, time.Duration(-1), o.ReadTimeout, "-1 turns the read timeout off")
	assert.Equal(t, 2*time.Second, o.DialTimeout)
	assert.Equal(t, -1, o.MaxRetries)
	assert.Equal(t, 2, o.Protocol)
	assert.Equal(t, "app", pu.opts.Prefix)
	assert.Equal(t, 250*time.Millisecond, pu.opts.Block)
	assert.Equal(t, time.Millisecond, pu.opts.ReadLinger)

	u, err = url.Parse("redis://h:7000?cluster=true&addr=h2:7001&pool_size=3")
	require.NoError(t, err)
	pu, err = parseURL(u)
	require.NoError(t, err)
	require.NotNil(t, pu.cluster, "cluster=true opens a cluster client")
	assert.Equal(t, []string{"h:7000", "h2:7001"}, pu.cluster.Addrs)
	assert.Equal(t, 3, pu.cluster.PoolSize)
	assert.True(t, pu.cluster.ContextTimeoutEnabled, "the cluster client honours ctx deadlines")
}

func TestParseURLRefusesWhatGoRedisWouldMisread(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, raw string }{
		{"negative pool size (go-redis panics)", "redis://h?pool_size=-1"},
		{"zero pool size", "redis://h?pool_size=0"},
		{"negative min idle", "redis://h?min_idle_conns=-1"},
		{"protocol 4", "redis://h?protocol=4"},
		{"zero dial timeout", "redis://h?dial_timeout=0s"},
		{"repeated parameter", "redis://h?prefix=a&prefix=b"},
		{"unknown parameter", "redis://h?bogus=1"},
		{"addr without cluster", "redis://h?addr=h2:1"},
		{"addr without host", "redis://h?cluster=true&addr=:1"},
		{"opaque URL", "redis:default:pw@h:6390"},
		{"no host", "redis://default:pw@"},
		{"path that is no database", "redis://h/pw"},
		{"negative database", "redis://h/-1"},
		{"skip_verify", "rediss://h?skip_verify=true"},
		{"other scheme", "http://h"},
	}
	for _, tt := range tests {
		u, err := url.Parse(tt.raw)
		require.NoError(t, err, tt.raw)
		_, err = parseURL(u)
		assert.ErrorIs(t, err, backend.ErrInvalidOption, "%s: %s", tt.name, tt.raw)
	}
}
