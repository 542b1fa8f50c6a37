package redisstream

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
)

func init() {
	bus.Register("redis", openURL)
	bus.Register("rediss", openURL)
}

// Backend parameters of a URL. Every other parameter is a client
// parameter of go-redis (pool_size, dial_timeout, read_timeout, ...); an
// unknown one is an error.
const (
	paramPrefix       = "prefix"
	paramBlock        = "block"
	paramRetention    = "retention"
	paramMaxLen       = "maxlen"
	paramMaxAge       = "maxage"
	paramTrimInterval = "trim_interval"
	paramMaxPayload   = "max_payload"
	paramCluster      = "cluster"
)

func openURL(ctx context.Context, u *url.URL) (backend.Backend, error) {
	return OpenURL(ctx, u)
}

// OpenURL opens a backend from a redis:// or rediss:// URL:
//
//	redis://[user:password@]host:port[/db][?param=value&...]
//
// User, password and database come from the URL. Backend parameters:
// prefix, block (duration), retention (settled, maxlen, maxage, all),
// maxlen, maxage (duration), trim_interval (duration), max_payload
// (bytes), cluster (true: open a cluster client; more seed nodes with
// addr=host:port). Other parameters go to the Redis client (pool_size,
// dial_timeout, ...). Unknown parameters are an error. rediss:// verifies
// the server certificate; verification cannot be turned off through the
// URL (pass a client with your own tls.Config to New instead).
func OpenURL(ctx context.Context, u *url.URL) (*Backend, error) {
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return nil, fmt.Errorf("%w: scheme %q is not redis or rediss", ErrInvalidOption, u.Scheme)
	}
	q := u.Query()
	var o Options
	var cluster bool
	var errs []error
	take := func(name string) (string, bool) {
		vs, ok := q[name]
		if !ok {
			return "", false
		}
		q.Del(name)
		if len(vs) != 1 {
			errs = append(errs, fmt.Errorf("%w: parameter %q given %d times", ErrInvalidOption, name, len(vs)))
			return "", false
		}
		return vs[0], true
	}
	dur := func(name string, dst *time.Duration) {
		if v, ok := take(name); ok {
			d, err := time.ParseDuration(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("%w: %s=%q: %v", ErrInvalidOption, name, v, err))
			}
			*dst = d
		}
	}
	if v, ok := take(paramPrefix); ok {
		o.Prefix = v
	}
	dur(paramBlock, &o.Block)
	dur(paramMaxAge, &o.MaxAge)
	dur(paramTrimInterval, &o.TrimInterval)
	if v, ok := take(paramRetention); ok {
		r, known := retentionNames[v]
		if !known {
			errs = append(errs, fmt.Errorf("%w: retention=%q (want settled, maxlen, maxage or all)", ErrInvalidOption, v))
		}
		o.Retention = r
	}
	if v, ok := take(paramMaxLen); ok {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("%w: maxlen=%q: %v", ErrInvalidOption, v, err))
		}
		o.MaxLen = n
	}
	if v, ok := take(paramMaxPayload); ok {
		n, err := strconv.Atoi(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%w: max_payload=%q: %v", ErrInvalidOption, v, err))
		}
		o.MaxPayload = n
	}
	if v, ok := take(paramCluster); ok {
		c, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%w: cluster=%q: %v", ErrInvalidOption, v, err))
		}
		cluster = c
	}
	if _, ok := q["skip_verify"]; ok {
		errs = append(errs, fmt.Errorf("%w: skip_verify: TLS certificate verification cannot be turned off through the URL; pass a client with your own tls.Config to redisstream.New", ErrInvalidOption))
		q.Del("skip_verify")
	}
	if _, ok := q["addr"]; ok && !cluster {
		errs = append(errs, fmt.Errorf("%w: addr needs cluster=true", ErrInvalidOption))
	}
	if len(errs) > 0 {
		return nil, joinErrs(errs)
	}
	cu := *u
	cu.RawQuery = q.Encode()
	var client redis.UniversalClient
	if cluster {
		co, err := redis.ParseClusterURL(cu.String())
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalidOption, err)
		}
		client = redis.NewClusterClient(co)
	} else {
		ro, err := redis.ParseURL(cu.String())
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalidOption, err)
		}
		client = redis.NewClient(ro)
	}
	b, err := New(client, &o)
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	b.ownClient = true
	if err := client.Ping(ctx).Err(); err != nil {
		_ = b.Close()
		return nil, fmt.Errorf("redisstream: ping: %w", err)
	}
	return b, nil
}

func joinErrs(errs []error) error {
	if len(errs) == 1 {
		return errs[0]
	}
	err := errs[0]
	for _, e := range errs[1:] {
		err = fmt.Errorf("%w; %w", err, e)
	}
	return err
}
