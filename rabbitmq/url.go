package rabbitmq

import (
	"context"
	"fmt"
	"net/url"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/urlopt"
)

func init() {
	bus.Register("amqp", openURL)
	bus.Register("amqps", openURL)
}

func openURL(ctx context.Context, u *url.URL) (backend.Backend, error) {
	return OpenURL(ctx, u)
}

// OpenURL opens a backend from an amqp:// or amqps:// URL:
//
//	amqp://user:password@host:port/vhost?param=value&...
//
// The user, password, host, port (5672, or 5671 for amqps) and virtual
// host (the path, "/" when empty) are RabbitMQ's. Backend parameters:
// prefix, heartbeat, dial_timeout, write_timeout, close_timeout and
// management (see Options); an unknown parameter is an error. No credential appears in
// any error. It dials before it returns, bounded by ctx.
func OpenURL(ctx context.Context, u *url.URL) (*Backend, error) {
	if err := urlopt.CheckForm(u, true); err != nil {
		return nil, fmt.Errorf("rabbitmq: open: %w", err)
	}
	p := urlopt.New(u.Query())
	o := &Options{}
	if s, ok := p.String("prefix"); ok {
		o.Prefix = s
	}
	if d, ok := p.Duration("heartbeat", 0); ok {
		o.Heartbeat = d
	}
	if d, ok := p.Duration("dial_timeout", 0); ok {
		o.DialTimeout = d
	}
	if d, ok := p.Duration("write_timeout", 0); ok {
		o.WriteTimeout = d
	}
	if d, ok := p.Duration("close_timeout", 0); ok {
		o.CloseTimeout = d
	}
	if s, ok := p.String("management"); ok {
		o.Management = s
	}
	if err := p.Err(); err != nil {
		return nil, fmt.Errorf("rabbitmq: open %q: %w", urlopt.Redact(u), err)
	}
	cu := *u
	cu.RawQuery = ""
	b, err := New(ctx, cu.String(), o)
	if err != nil {
		return nil, urlopt.RedactError(err, u)
	}
	return b, nil
}
