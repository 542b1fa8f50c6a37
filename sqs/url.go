package sqs

import (
	"context"
	"fmt"
	"net/url"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/urlopt"
)

func init() {
	bus.Register("sqs", openURL)
}

func openURL(ctx context.Context, u *url.URL) (backend.Backend, error) {
	return OpenURL(ctx, u)
}

// OpenURL opens a backend from an sqs:// URL:
//
//	sqs://region?param=value&...
//
// The host is the AWS region. Parameters: endpoint (the base URL of SNS
// and SQS, for an emulator or a VPC endpoint), prefix, close_timeout,
// request_timeout and fifo (a boolean; see Options); an unknown
// parameter is an error. Credentials come from the AWS SDK's default
// chain, never from the URL, and appear in no error. It checks the URL
// before any I/O.
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
		return nil, fmt.Errorf("sqs: open: %w", err)
	}
	if u.User != nil {
		return nil, fmt.Errorf("sqs: open %q: %w: an sqs URL carries no credentials; they come from the AWS SDK's default chain", urlopt.Redact(u), backend.ErrInvalidOption)
	}
	if u.Port() != "" {
		return nil, fmt.Errorf("sqs: open %q: %w: the host of an sqs URL is a region, without a port", urlopt.Redact(u), backend.ErrInvalidOption)
	}
	if u.Path != "" && u.Path != "/" {
		return nil, fmt.Errorf("sqs: open %q: %w: an sqs URL has no path", urlopt.Redact(u), backend.ErrInvalidOption)
	}
	o := &Options{Region: u.Hostname()}
	p := urlopt.New(u.Query())
	if s, ok := p.String("endpoint"); ok {
		o.Endpoint = s
	}
	if s, ok := p.String("prefix"); ok {
		o.Prefix = s
	}
	if d, ok := p.Duration("close_timeout", 0); ok {
		o.CloseTimeout = d
	}
	if d, ok := p.Duration("request_timeout", 0); ok {
		o.RequestTimeout = d
	}
	if v, ok := p.Bool("fifo"); ok {
		o.FIFO = v
	}
	if err := p.Err(); err != nil {
		return nil, fmt.Errorf("sqs: open %q: %w", urlopt.Redact(u), err)
	}
	if _, err := o.withDefaults(); err != nil {
		return nil, fmt.Errorf("sqs: open %q: %w", urlopt.Redact(u), err)
	}
	return o, nil
}
