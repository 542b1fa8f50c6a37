package kafka

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/url"
	"strings"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/urlopt"
)

func init() {
	bus.Register("kafka", openURL)
}

func openURL(ctx context.Context, u *url.URL) (backend.Backend, error) {
	return OpenURL(ctx, u)
}

// OpenURL opens a backend from a kafka:// URL:
//
//	kafka://[user:password@]host:port[,host:port...]?param=value&...
//
// The hosts are the seed brokers. Parameters: tls (true: connect over
// TLS with the host's roots), tls_server_name, sasl (plain,
// scram-sha-256 or scram-sha-512, with the URL's user and password),
// client_id, dial_timeout, request_timeout, session_timeout,
// close_timeout and partitions (see Options); an unknown parameter is an
// error. No credential appears in any error. It checks the URL before
// any I/O and then reaches a broker, bounded by ctx.
func OpenURL(ctx context.Context, u *url.URL) (*Backend, error) {
	o, err := parseURL(u)
	if err != nil {
		return nil, err
	}
	b, err := New(ctx, o)
	if err != nil {
		return nil, urlopt.RedactError(err, u)
	}
	return b, nil
}

// parseURL reads the Options of u, without I/O.
func parseURL(u *url.URL) (*Options, error) {
	if err := urlopt.CheckForm(u, true); err != nil {
		return nil, fmt.Errorf("kafka: open: %w", err)
	}
	if u.Path != "" && u.Path != "/" {
		return nil, fmt.Errorf("kafka: open %q: %w: a kafka URL has no path", urlopt.Redact(u), backend.ErrInvalidOption)
	}
	o := &Options{Seeds: strings.Split(u.Host, ",")}
	if u.User != nil {
		o.User = u.User.Username()
		o.Password, _ = u.User.Password()
	}
	p := urlopt.New(u.Query())
	if on, ok := p.Bool("tls"); ok && on {
		o.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if s, ok := p.String("tls_server_name"); ok {
		if o.TLS == nil {
			p.Fail(fmt.Errorf("%w: tls_server_name without tls=true", backend.ErrInvalidOption))
		} else {
			o.TLS.ServerName = s
		}
	}
	if s, ok := p.Enum("sasl", "plain", "scram-sha-256", "scram-sha-512"); ok {
		o.SASL = s
	}
	if s, ok := p.String("client_id"); ok {
		o.ClientID = s
	}
	if n, ok := p.Int("partitions", 1, 10000); ok {
		o.Partitions = n
	}
	if d, ok := p.Duration("dial_timeout", 0); ok {
		o.DialTimeout = d
	}
	if d, ok := p.Duration("request_timeout", 0); ok {
		o.RequestTimeout = d
	}
	if d, ok := p.Duration("session_timeout", 0); ok {
		o.SessionTimeout = d
	}
	if d, ok := p.Duration("close_timeout", 0); ok {
		o.CloseTimeout = d
	}
	if err := p.Err(); err != nil {
		return nil, fmt.Errorf("kafka: open %q: %w", urlopt.Redact(u), err)
	}
	if _, err := o.withDefaults(); err != nil {
		return nil, urlopt.RedactError(fmt.Errorf("kafka: open %q: %w", urlopt.Redact(u), err), u)
	}
	return o, nil
}
