package postgres

import (
	"context"
	"fmt"
	"net/url"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/urlopt"
)

func init() {
	bus.Register("postgres", openURL)
	bus.Register("postgresql", openURL)
}

func openURL(ctx context.Context, u *url.URL) (backend.Backend, error) {
	return OpenURL(ctx, u)
}

// backendParams are the URL parameters the backend reads itself; every
// other one goes to pgxpool.ParseConfig (pool_max_conns, sslmode,
// application_name ...), which passes those it does not know to the
// server as run-time parameters.
var backendParams = []string{"block", "dedup_window", "max_payload", "retention", "trim_interval", "channel", "migrate"}

// OpenURL opens a backend, with a pool of its own, from a postgres:// or
// postgresql:// URL:
//
//	postgres://user:password@host:port/database?param=value&...
//
// Backend parameters: block (duration, at most 1s), dedup_window
// (duration; 0 turns it off), max_payload (bytes), retention (settled,
// all), trim_interval (duration), channel (the LISTEN/NOTIFY channel)
// and migrate (false: the schema must exist). Every other parameter is
// pgx's (see pgxpool.ParseConfig). No credential appears in any error.
// The backend closes the pool when it is closed.
func OpenURL(ctx context.Context, u *url.URL) (*Backend, error) {
	opts, rest, err := parseParams(u)
	if err != nil {
		return nil, err
	}
	cu := *u
	cu.RawQuery = rest.Encode()
	cfg, err := pgxpool.ParseConfig(cu.String())
	if err != nil {
		return nil, fmt.Errorf("postgres: open %q: %w: the URL does not parse", urlopt.Redact(u), ErrInvalidOption)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: open %q: %w", urlopt.Redact(u), err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: open %q: %w", urlopt.Redact(u), urlopt.Explain(err, "PostgreSQL", u.Host))
	}
	b, err := newBackend(ctx, pool, true, opts)
	if err != nil {
		pool.Close()
		return nil, err
	}
	return b, nil
}

// parseParams splits the backend's parameters from pgx's.
func parseParams(u *url.URL) (*Options, url.Values, error) {
	q := u.Query()
	ours, rest := url.Values{}, url.Values{}
	for k, v := range q {
		rest[k] = v
	}
	for _, k := range backendParams {
		if v, ok := q[k]; ok {
			ours[k] = v
			delete(rest, k)
		}
	}
	p := urlopt.New(ours)
	o := &Options{}
	if d, ok := p.Duration("block", 0); ok {
		o.Block = d
	}
	if d, ok := p.Window("dedup_window"); ok {
		o.DedupWindow = d
		if d == 0 {
			o.DedupWindow = -1
		}
	}
	if n, ok := p.Int("max_payload", 1, maxMaxPayload); ok {
		o.MaxPayload = n
	}
	if r, ok := p.Enum("retention", "settled", "all"); ok && r == "all" {
		o.Retention = RetainAll
	}
	if d, ok := p.Duration("trim_interval", 0); ok {
		o.TrimInterval = d
	}
	if c, ok := p.String("channel"); ok {
		o.Channel = c
	}
	if m, ok := p.Bool("migrate"); ok {
		o.SkipMigrate = !m
	}
	if err := p.Err(); err != nil {
		return nil, nil, fmt.Errorf("postgres: open %q: %w", urlopt.Redact(u), err)
	}
	if _, err := o.withDefaults(); err != nil {
		return nil, nil, fmt.Errorf("postgres: open %q: %w", urlopt.Redact(u), err)
	}
	return o, rest, nil
}
