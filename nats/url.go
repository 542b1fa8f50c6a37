package nats

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/url"
	"strings"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/eventbus-go/bus/internal/urlopt"
)

// Connect dials rawURL (nats://, tls:// or nats+tls://, with user and
// password or a token in the URL) with the connection settings of opts
// and returns a Backend that owns the connection. URL query parameters
// override opts (see Options for their names). The URL is redacted in
// every error, log line and observer event.
func Connect(ctx context.Context, rawURL string, opts *Options) (*Backend, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("nats: connect: %w", urlopt.ParseError(rawURL))
	}
	return Open(ctx, u, opts)
}

// Open is Connect with a parsed URL; bus.Open calls it for the nats://,
// tls:// and nats+tls:// schemes.
func Open(ctx context.Context, u *url.URL, opts *Options) (*Backend, error) {
	o, server, secure, err := parseURL(u, opts)
	if err != nil {
		return nil, err
	}
	nopts, err := o.connOptions(redacted(&server), secure || o.wantTLS(), func(err error) error {
		if err == nil {
			return nil
		}
		return urlopt.RedactError(err, u)
	})
	if err != nil {
		return nil, fmt.Errorf("nats: open %q: %w", redacted(u), err)
	}
	type result struct {
		nc  *natsgo.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		nc, err := natsgo.Connect(server.String(), nopts...)
		ch <- result{nc, err}
	}()
	var r result
	select {
	case r = <-ch:
	case <-ctx.Done():
		go func() {
			if r := <-ch; r.nc != nil {
				r.nc.Close()
			}
		}()
		return nil, fmt.Errorf("nats: open %q: %w", redacted(u), ctx.Err())
	}
	if r.err != nil {
		err := urlopt.RedactError(r.err, u)
		if errors.Is(r.err, natsgo.ErrNoServers) {
			err = fmt.Errorf("could not reach a NATS server at %s (nothing listens there, or it refused the connection): %w", server.Host, err)
		} else {
			err = urlopt.Explain(err, "NATS", server.Host)
		}
		return nil, fmt.Errorf("nats: connect: %w", err)
	}
	b, err := newBackend(r.nc, true, o)
	if err != nil {
		r.nc.Close()
		return nil, fmt.Errorf("nats: open %q: %w", redacted(u), err)
	}
	b.origin.Store(u)
	o.Logger.Info("nats: connected", "url", connectedURL(r.nc), "server_version", r.nc.ConnectedServerVersion(), "jetstream", !o.CoreNATS)
	return b, nil
}

// parseURL reads u and opts without I/O: it returns the options (opts
// with the URL's parameters applied and defaults filled in), the server
// URL to dial (no query, path or fragment) and whether the scheme asks for
// TLS. Its errors never hold a secret of u.
func parseURL(u *url.URL, opts *Options) (Options, url.URL, bool, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if err := urlopt.CheckForm(u, true); err != nil {
		return Options{}, url.URL{}, false, fmt.Errorf("nats: open: %w", err)
	}
	secure := false
	switch u.Scheme {
	case "nats":
	case "tls", "nats+tls":
		secure = true
	default:
		return Options{}, url.URL{}, false, fmt.Errorf("nats: open %q: %w: scheme %q", redacted(u), ErrInvalidOption, u.Scheme)
	}
	if u.Path != "" && u.Path != "/" {
		return Options{}, url.URL{}, false, fmt.Errorf("nats: open %q: %w: a NATS URL has no path", redacted(u), ErrInvalidOption)
	}
	if err := parseURLOptions(u.Query(), &o); err != nil {
		return Options{}, url.URL{}, false, fmt.Errorf("nats: open %q: %w", redacted(u), err)
	}
	o, err := o.withDefaults()
	if err != nil {
		return Options{}, url.URL{}, false, fmt.Errorf("nats: open %q: %w", redacted(u), err)
	}
	server := *u
	server.RawQuery, server.Fragment, server.RawFragment, server.Path, server.RawPath = "", "", "", "", ""
	if secure {
		server.Scheme = "tls"
	}
	return o, server, secure, nil
}

// redacted is u for logs and errors (see urlopt.Redact): a password, or a
// token (a user part without a password), is masked.
func redacted(u *url.URL) string { return urlopt.Redact(u) }

// connectedURL is the redacted URL of the server nc is connected to.
// nats.go's own ConnectedUrlRedacted masks passwords but not tokens.
func connectedURL(nc *natsgo.Conn) string {
	return urlopt.RedactString(nc.ConnectedUrl())
}

// redact masks the secrets of the URL the backend was opened with in an
// error from the connection.
func (b *Backend) redact(err error) error {
	return urlopt.RedactError(err, b.origin.Load())
}

// parseURLOptions reads the query parameters of a URL into o (which holds
// defaults the URL may override). Unknown or repeated parameters are an
// error, so a typo never falls back to a default silently.
func parseURLOptions(q url.Values, o *Options) error {
	p := urlopt.New(q)
	streamParams(p, o)
	if b, ok := p.Bool("compression"); ok {
		o.Compression = b
	}
	if n, ok := p.Int("replicas", 1, 5); ok {
		o.Replicas = n
	}
	if n, ok := p.Int("publish_window", 1, 1<<20); ok {
		o.PublishWindow = n
	}
	if n, ok := p.Int("max_pings_out", 1, 1000); ok {
		o.MaxPingsOut = n
	}
	if n, ok := p.Int64("max_bytes", 1, math.MaxInt64); ok {
		o.MaxBytes = n
	}
	if n, ok := p.Int64("max_msgs", 1, math.MaxInt64); ok {
		o.MaxMsgs = n
	}
	durations := []struct {
		name string
		dst  *time.Duration
	}{
		{"max_age", &o.MaxAge}, {"duplicates", &o.Duplicates}, {"dedup_window", &o.Duplicates}, {"publish_timeout", &o.PublishTimeout},
		{"reconnect_wait", &o.ReconnectWait}, {"ping_interval", &o.PingInterval}, {"connect_timeout", &o.ConnectTimeout},
	}
	for _, d := range durations {
		if v, ok := p.Duration(d.name, time.Millisecond); ok {
			*d.dst = v
		}
	}
	strs := []struct {
		name string
		dst  *string
	}{
		{"name", &o.Name}, {"creds", &o.CredsFile}, {"nkey", &o.NKeySeedFile}, {"tls_ca", &o.TLSCAFile},
		{"tls_cert", &o.TLSCertFile}, {"tls_key", &o.TLSKeyFile}, {"tls_server_name", &o.TLSServerName},
	}
	for _, s := range strs {
		if v, ok := p.String(s.name); ok {
			*s.dst = v
		}
	}
	return p.Err()
}

// streamParams reads the parameters that say where messages are kept:
// JetStream or core, subjects, streams, storage and retention.
func streamParams(p *urlopt.Params, o *Options) {
	if b, ok := p.Bool("jetstream"); ok {
		o.CoreNATS = !b
	}
	if v, ok := p.String("prefix"); ok {
		if !validSubjectPrefix(v) {
			p.Fail(fmt.Errorf("%w: prefix=%q: want dot-separated tokens of printable ASCII without spaces, '*' or '>'", ErrInvalidOption, v))
		}
		o.SubjectPrefix = v
	}
	if v, ok := p.Enum("streams", "per-topic", "shared"); ok {
		o.StreamMode = map[string]StreamMode{"per-topic": StreamPerTopic, "shared": StreamShared}[v]
	}
	if v, ok := p.String("stream_prefix"); ok {
		o.StreamPrefix = v
	}
	if v, ok := p.String("stream"); ok {
		o.StreamName = v
	}
	if b, ok := p.Bool("bind"); ok {
		o.BindOnly = b
	}
	if v, ok := p.Enum("storage", "file", "memory"); ok {
		o.Storage = map[string]Storage{"file": StorageFile, "memory": StorageMemory}[v]
	}
	if v, ok := p.Enum("retention", "limits", "interest"); ok {
		o.Retention = map[string]Retention{"limits": RetentionLimits, "interest": RetentionInterest}[v]
	}
}

// validSubjectPrefix reports whether p can start every subject: tokens of
// printable ASCII (0x21-0x7E) separated by single dots, without the
// wildcards '*' and '>'.
func validSubjectPrefix(p string) bool {
	if p == "" {
		return false
	}
	for tok := range strings.SplitSeq(p, ".") {
		if tok == "" || tok == "*" || tok == ">" {
			return false
		}
		for i := 0; i < len(tok); i++ {
			if c := tok[i]; c < 0x21 || c > 0x7e || c == '*' || c == '>' {
				return false
			}
		}
	}
	return true
}
