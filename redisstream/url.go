package redisstream

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/urlopt"
)

func init() {
	bus.Register("redis", openURL)
	bus.Register("rediss", openURL)
}

func openURL(ctx context.Context, u *url.URL) (backend.Backend, error) {
	return OpenURL(ctx, u)
}

// OpenURL opens a backend from a redis:// or rediss:// URL:
//
//	redis://[user:password@]host:port[/db][?param=value&...]
//
// User, password and database come from the URL; a host is required.
// Backend parameters: prefix, block (duration), read_linger (duration;
// -1 turns it off), retention (settled,
// maxlen, maxage, all), maxlen, maxage (duration), trim_interval
// (duration), max_payload (bytes), cluster (true: open a cluster client;
// more seed nodes with addr=host:port, repeatable). Client parameters,
// each range-checked: client_name, protocol (2 or 3), pool_size,
// min_idle_conns, max_idle_conns, max_active_conns, max_retries (-1 for
// none), pool_timeout, dial_timeout, read_timeout, write_timeout,
// conn_max_idle_time, conn_max_lifetime (durations; -1 turns a timeout
// off where go-redis allows it), min_retry_backoff, max_retry_backoff.
// Unknown or repeated parameters are an error, and no credential appears
// in any error. rediss:// verifies the server certificate; verification
// cannot be turned off through the URL (pass a client with your own
// tls.Config to New instead). The client honours ctx deadlines
// (ContextTimeoutEnabled), so every call returns by its ctx even on a
// dead link.
func OpenURL(ctx context.Context, u *url.URL) (*Backend, error) {
	pu, err := parseURL(u)
	if err != nil {
		return nil, err
	}
	var client redis.UniversalClient
	if pu.cluster != nil {
		client = redis.NewClusterClient(pu.cluster)
	} else {
		client = redis.NewClient(pu.single)
	}
	b, err := New(client, &pu.opts)
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	b.ownClient = true
	if err := client.Ping(ctx).Err(); err != nil {
		_ = b.Close()
		return nil, fmt.Errorf("redisstream: ping: %w", urlopt.Explain(urlopt.RedactError(err, u), "Redis", u.Host))
	}
	return b, nil
}

// parsedURL is what a redis URL asks for: backend options and the client
// options of either a single-node or a cluster client.
type parsedURL struct {
	opts    Options
	single  *redis.Options
	cluster *redis.ClusterOptions
}

// parseURL reads u without I/O. Every parameter is validated, so the
// client options it returns never make go-redis panic, and its errors
// never hold a secret of u.
func parseURL(u *url.URL) (parsedURL, error) {
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return parsedURL{}, fmt.Errorf("redisstream: open: %w: scheme %q is not redis or rediss", ErrInvalidOption, u.Scheme)
	}
	if err := urlopt.CheckForm(u, true); err != nil {
		return parsedURL{}, fmt.Errorf("redisstream: open: %w", err)
	}
	if db := strings.TrimPrefix(u.Path, "/"); db != "" {
		if n, err := strconv.Atoi(db); err != nil || n < 0 || strconv.Itoa(n) != db {
			// The path may be a misplaced credential: it is not quoted.
			return parsedURL{}, fmt.Errorf("redisstream: open %q: %w: the path must be a database number, such as /0", urlopt.Redact(u), ErrInvalidOption)
		}
	}
	p := urlopt.New(u.Query())
	o := backendParams(p)
	cluster, _ := p.Bool("cluster")
	seeds := clusterSeeds(p, u.Query()["addr"], cluster)
	if p.Has("skip_verify") {
		p.Fail(fmt.Errorf("%w: skip_verify: TLS certificate verification cannot be turned off through the URL; pass a client with your own tls.Config to redisstream.New", ErrInvalidOption))
	}
	var co clientParams
	co.parse(p)
	if err := p.Err(); err != nil {
		return parsedURL{}, fmt.Errorf("redisstream: open: %w", urlopt.RedactError(err, u))
	}
	// go-redis reads the address, credentials, database and TLS from the
	// URL without its query; every parameter was validated above.
	base := *u
	base.RawQuery = ""
	if cluster {
		cl, err := redis.ParseClusterURL(base.String())
		if err != nil {
			return parsedURL{}, fmt.Errorf("redisstream: open: %w", redactParseError(err, u))
		}
		cl.Addrs = append(cl.Addrs, seeds...)
		co.applyCluster(cl)
		cl.ContextTimeoutEnabled = true
		return parsedURL{opts: o, cluster: cl}, nil
	}
	ro, err := redis.ParseURL(base.String())
	if err != nil {
		return parsedURL{}, fmt.Errorf("redisstream: open: %w", redactParseError(err, u))
	}
	co.apply(ro)
	ro.ContextTimeoutEnabled = true
	return parsedURL{opts: o, single: ro}, nil
}

// backendParams reads the backend's own URL parameters.
func backendParams(p *urlopt.Params) Options {
	var o Options
	if v, ok := p.String("prefix"); ok {
		o.Prefix = v
	}
	if d, ok := p.Duration("block", time.Millisecond); ok {
		o.Block = d
	}
	if d, ok := p.DurationOrOff("read_linger"); ok {
		o.ReadLinger = d
	}
	if d, ok := p.Duration("maxage", time.Millisecond); ok {
		o.MaxAge = d
	}
	if d, ok := p.Window("dedup_window"); ok {
		o.DedupWindow = d
		if d == 0 {
			o.DedupWindow = -1
		}
	}
	if d, ok := p.Duration("trim_interval", time.Millisecond); ok {
		o.TrimInterval = d
	}
	if v, ok := p.Enum("retention", "settled", "maxlen", "maxage", "all"); ok {
		o.Retention = retentionNames[v]
	}
	if n, ok := p.Int64("maxlen", 1, math.MaxInt64); ok {
		o.MaxLen = n
	}
	if n, ok := p.Int("max_payload", 1, math.MaxInt32); ok {
		o.MaxPayload = n
	}
	return o
}

// clusterSeeds checks the addr parameters (extra cluster seeds).
func clusterSeeds(p *urlopt.Params, addrs []string, cluster bool) []string {
	if len(addrs) == 0 {
		return nil
	}
	p.Has("addr")
	if !cluster {
		p.Fail(fmt.Errorf("%w: addr needs cluster=true", ErrInvalidOption))
	}
	for _, a := range addrs {
		if h, _, err := net.SplitHostPort(a); err != nil || h == "" {
			p.Fail(fmt.Errorf("%w: addr=%q is not host:port", ErrInvalidOption, a))
		}
	}
	return addrs
}

// redactParseError is a go-redis URL error with the secrets of u masked.
func redactParseError(err error, u *url.URL) error {
	return urlopt.RedactError(fmt.Errorf("%w: %w", ErrInvalidOption, err), u)
}

// clientParams are the go-redis client parameters a URL may set; zero
// fields keep go-redis's defaults.
type clientParams struct {
	name                                            string
	protocol                                        int
	poolSize, minIdle, maxIdle, maxActive           int
	maxRetries                                      int
	poolTimeout, dial, read, write                  time.Duration
	idleTime, lifetime, minBackoff, maxBackoff      time.Duration
	hasRetries, hasRead, hasWrite, hasIdle, hasLife bool
}

func (c *clientParams) parse(p *urlopt.Params) {
	c.name, _ = p.String("client_name")
	c.protocol, _ = p.Int("protocol", 2, 3)
	c.poolSize, _ = p.Int("pool_size", 1, 1<<16)
	c.minIdle, _ = p.Int("min_idle_conns", 0, 1<<16)
	c.maxIdle, _ = p.Int("max_idle_conns", 0, 1<<16)
	c.maxActive, _ = p.Int("max_active_conns", 0, 1<<16)
	c.maxRetries, c.hasRetries = p.Int("max_retries", -1, 100)
	c.poolTimeout, _ = p.Duration("pool_timeout", time.Millisecond)
	c.dial, _ = p.Duration("dial_timeout", time.Millisecond)
	c.read, c.hasRead = p.DurationOrOff("read_timeout")
	c.write, c.hasWrite = p.DurationOrOff("write_timeout")
	c.idleTime, c.hasIdle = p.DurationOrOff("conn_max_idle_time")
	c.lifetime, c.hasLife = p.DurationOrOff("conn_max_lifetime")
	c.minBackoff, _ = p.Duration("min_retry_backoff", time.Millisecond)
	c.maxBackoff, _ = p.Duration("max_retry_backoff", time.Millisecond)
}

// clientFields points at the fields clientParams sets, in a single-node
// or a cluster options struct.
type clientFields struct {
	name                                       *string
	protocol, poolSize, minIdle, maxIdle       *int
	maxActive, maxRetries                      *int
	poolTimeout, dial, read, write             *time.Duration
	idleTime, lifetime, minBackoff, maxBackoff *time.Duration
}

func (c *clientParams) apply(o *redis.Options) {
	c.set(clientFields{&o.ClientName, &o.Protocol, &o.PoolSize, &o.MinIdleConns, &o.MaxIdleConns,
		&o.MaxActiveConns, &o.MaxRetries, &o.PoolTimeout, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout,
		&o.ConnMaxIdleTime, &o.ConnMaxLifetime, &o.MinRetryBackoff, &o.MaxRetryBackoff})
}

func (c *clientParams) applyCluster(o *redis.ClusterOptions) {
	c.set(clientFields{&o.ClientName, &o.Protocol, &o.PoolSize, &o.MinIdleConns, &o.MaxIdleConns,
		&o.MaxActiveConns, &o.MaxRetries, &o.PoolTimeout, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout,
		&o.ConnMaxIdleTime, &o.ConnMaxLifetime, &o.MinRetryBackoff, &o.MaxRetryBackoff})
}

// set writes the parameters that were given; the others keep go-redis's
// defaults.
func (c *clientParams) set(f clientFields) {
	setIf(f.name, c.name, c.name != "")
	setIf(f.protocol, c.protocol, c.protocol != 0)
	setIf(f.poolSize, c.poolSize, c.poolSize != 0)
	setIf(f.minIdle, c.minIdle, c.minIdle != 0)
	setIf(f.maxIdle, c.maxIdle, c.maxIdle != 0)
	setIf(f.maxActive, c.maxActive, c.maxActive != 0)
	setIf(f.maxRetries, c.maxRetries, c.hasRetries)
	setIf(f.poolTimeout, c.poolTimeout, c.poolTimeout != 0)
	setIf(f.dial, c.dial, c.dial != 0)
	setIf(f.read, c.read, c.hasRead)
	setIf(f.write, c.write, c.hasWrite)
	setIf(f.idleTime, c.idleTime, c.hasIdle)
	setIf(f.lifetime, c.lifetime, c.hasLife)
	setIf(f.minBackoff, c.minBackoff, c.minBackoff != 0)
	setIf(f.maxBackoff, c.maxBackoff, c.maxBackoff != 0)
}

func setIf[T any](dst *T, v T, ok bool) {
	if ok {
		*dst = v
	}
}
