package postgres

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

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

// DefaultConnectTimeout bounds, when the URL sets no connect_timeout,
// how long OpenURL waits for a connection and the server's first answer,
// whatever its ctx: a server that accepts the connection and never
// answers fails the open after it.
const DefaultConnectTimeout = 10 * time.Second

// backendParams are the URL parameters the backend reads itself; the
// others are pgx's and go to pgxpool.ParseConfig.
var backendParams = []string{"block", "dedup_window", "max_payload", "retention", "trim_interval", "channel", "migrate"}

// OpenURL opens a backend, with a pool of its own, from a postgres:// or
// postgresql:// URL:
//
//	postgres://user:password@host:port/database?param=value&...
//
// The host and the database are required (a Unix socket's directory goes
// in the host parameter; libpq's default socket and database are never
// assumed). Backend parameters: block (duration, at most 1s),
// dedup_window (duration; 0 turns it off), max_payload (bytes),
// retention (settled, all), trim_interval (duration), channel (the
// LISTEN/NOTIFY channel) and migrate (false: the schema must exist).
// Connection parameters, as libpq and pgx define them: host, port,
// dbname (or database), user, password, passfile, connect_timeout
// (seconds; default 10, see [DefaultConnectTimeout]; 0: none but the
// ctx), sslmode, sslkey, sslcert, sslcertmode, sslrootcert,
// sslnegotiation, sslpassword, sslsni, krbspn, krbsrvname,
// target_session_attrs, service, servicefile, min_protocol_version,
// max_protocol_version, channel_binding, require_auth,
// application_name, statement_cache_capacity,
// description_cache_capacity, default_query_exec_mode, and the pool's
// pool_max_conns, pool_min_conns, pool_min_idle_conns,
// pool_max_conn_lifetime, pool_max_conn_idle_time,
// pool_health_check_period, pool_max_conn_lifetime_jitter and
// pool_ping_timeout. Server settings go in libpq's options parameter
// (options=-c%20search_path%3Dapp). Any other parameter, a value out of
// range and a URL without a host or a database are refused before any
// I/O, with an error wrapping [ErrInvalidOption]. Errors show the URL
// with its password masked. The backend closes the pool when it is
// closed.
func OpenURL(ctx context.Context, u *url.URL) (*Backend, error) {
	opts, cfg, err := parseURL(u)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: open %q: %w", redact(u), err)
	}
	pctx, cancel := ctx, context.CancelFunc(func() {})
	if t := cfg.ConnConfig.ConnectTimeout; t > 0 {
		pctx, cancel = context.WithTimeout(ctx, t)
	}
	err = pool.Ping(pctx)
	cancel()
	if err != nil {
		pool.Close()
		if ctx.Err() == nil && pctx.Err() != nil {
			err = fmt.Errorf("no answer within connect_timeout %v: %w", cfg.ConnConfig.ConnectTimeout, err)
		}
		return nil, fmt.Errorf("postgres: open %q: %w", redact(u), urlopt.Explain(err, "PostgreSQL", u.Host))
	}
	b, err := newBackend(ctx, pool, true, opts)
	if err != nil {
		pool.Close()
		return nil, err
	}
	return b, nil
}

// parseURL checks u and reads it into the backend's options and pgx's
// pool configuration, without I/O.
func parseURL(u *url.URL) (*Options, *pgxpool.Config, error) {
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return nil, nil, fmt.Errorf("postgres: open %q: %w: the scheme is not postgres:// or postgresql://", redact(u), ErrInvalidOption)
	}
	q := u.Query()
	_, hostParam := q["host"]
	if err := urlopt.CheckForm(u, false); err != nil {
		return nil, nil, fmt.Errorf("postgres: open: %w", err)
	}
	if u.Hostname() == "" && !hostParam {
		return nil, nil, fmt.Errorf("postgres: open %q: %w: the URL names no host (postgres://host:5432/database; a Unix socket's directory goes in ?host=): libpq's default is never assumed",
			redact(u), ErrInvalidOption)
	}
	_, dbname := q["dbname"]
	_, database := q["database"]
	if strings.Trim(u.Path, "/") == "" && !dbname && !database {
		return nil, nil, fmt.Errorf("postgres: open %q: %w: the URL names no database (postgres://host:5432/database): libpq's default is never assumed",
			redact(u), ErrInvalidOption)
	}
	p := urlopt.New(q)
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
	_, timeoutSet := p.Int("connect_timeout", 0, 24*3600)
	pgxParams(p)
	if err := p.Err(); err != nil {
		return nil, nil, fmt.Errorf("postgres: open %q: %w", redact(u), err)
	}
	if _, err := o.withDefaults(); err != nil {
		return nil, nil, fmt.Errorf("postgres: open %q: %w", redact(u), err)
	}
	for _, k := range backendParams {
		delete(q, k)
	}
	cu := *u
	cu.RawQuery = q.Encode()
	cfg, err := pgxpool.ParseConfig(cu.String())
	if err != nil {
		cause := "the URL does not parse"
		if inner := errors.Unwrap(err); inner != nil {
			cause = inner.Error()
		}
		return nil, nil, fmt.Errorf("postgres: open %q: %w: pgx refuses the URL: %s", redact(u), ErrInvalidOption, cause)
	}
	if !timeoutSet && cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = DefaultConnectTimeout
	}
	return o, cfg, nil
}

// pgxParams consumes the connection and pool parameters of libpq and
// pgx (but connect_timeout), checking the values pgx reads as numbers,
// durations or one of a set.
func pgxParams(p *urlopt.Params) {
	for _, k := range []string{"host", "port", "dbname", "database", "user", "passfile", "sslkey", "sslcert", "sslrootcert",
		"krbspn", "krbsrvname", "service", "servicefile", "min_protocol_version", "max_protocol_version", "require_auth",
		"application_name", "options"} {
		p.String(k)
	}
	p.Secret("password")
	p.Secret("sslpassword")
	p.Enum("sslmode", "disable", "allow", "prefer", "require", "verify-ca", "verify-full")
	p.Enum("sslcertmode", "disable", "allow", "require")
	p.Enum("sslnegotiation", "postgres", "direct")
	p.Enum("sslsni", "0", "1")
	p.Enum("channel_binding", "disable", "prefer", "require")
	p.Enum("target_session_attrs", "any", "read-write", "read-only", "primary", "standby", "prefer-standby")
	p.Enum("default_query_exec_mode", "cache_statement", "cache_describe", "describe_exec", "exec", "simple_protocol")
	p.Int("statement_cache_capacity", 0, 1<<20)
	p.Int("description_cache_capacity", 0, 1<<20)
	p.Int("pool_max_conns", 1, 1<<16)
	p.Int("pool_min_conns", 0, 1<<16)
	p.Int("pool_min_idle_conns", 0, 1<<16)
	for _, k := range []string{"pool_max_conn_lifetime", "pool_max_conn_idle_time", "pool_health_check_period",
		"pool_max_conn_lifetime_jitter", "pool_ping_timeout"} {
		p.Duration(k, 0)
	}
}

// redact returns u for errors: urlopt.Redact's form (the password
// masked), with the database name shown when it is a plain name.
func redact(u *url.URL) string {
	c := *u
	c.Path, c.RawPath = "", ""
	s := urlopt.Redact(&c)
	if !plainDatabase(u.Path) {
		return urlopt.Redact(u)
	}
	r, err := url.Parse(s)
	if err != nil || r.Opaque != "" {
		return s
	}
	r.Path = u.Path
	return r.String()
}

// plainDatabase reports whether path is "/" and a database name of
// letters, digits, '_', '-', '.' and '$' (one a credential misplaced in
// the path would not be).
func plainDatabase(path string) bool {
	name, ok := strings.CutPrefix(path, "/")
	return ok && len(name) <= 63 && strings.IndexFunc(name, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.' || r == '$')
	}) < 0
}
