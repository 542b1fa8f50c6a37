package kafka

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"time"

	"github.com/eventbus-go/bus/backend"
)

// Options configures a Backend. A nil *Options means every default. Every
// field's default is documented on it; every value is validated by New.
type Options struct {
	// Seeds are the host:port addresses of brokers to bootstrap from (at
	// least one).
	Seeds []string
	// ClientID names the backend's clients to the brokers (default "bus").
	ClientID string
	// TLS, when set, connects to the brokers over TLS with this
	// configuration.
	TLS *tls.Config
	// SASL is the SASL mechanism: "" (none), "plain", "scram-sha-256" or
	// "scram-sha-512", with User and Password.
	SASL     string
	User     string
	Password string
	// DialTimeout bounds a connection's TCP and TLS handshake (default
	// 10s).
	DialTimeout time.Duration
	// RequestTimeout bounds how long a request waits for its response
	// beyond the time the request itself asks the broker for (default
	// 10s): a broker that went silent fails the request within it.
	RequestTimeout time.Duration
	// SessionTimeout is the consumer group session: a member that sends
	// no heartbeat within it loses its partitions to the others (default
	// 10s; the broker bounds it by group.min.session.timeout.ms and
	// group.max.session.timeout.ms).
	SessionTimeout time.Duration
	// CloseTimeout bounds Close of a subscription and of the backend
	// (default 2s).
	CloseTimeout time.Duration
	// Dial, when set, opens every connection to a broker in place of a
	// net.Dialer with DialTimeout (for example through a proxy); addr is
	// the broker's advertised host:port. It is used without TLS.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Partitions is the partition count of a topic the backend creates
	// (default 0: the broker's num.partitions).
	Partitions int
}

const (
	defaultClientID       = "bus"
	defaultDialTimeout    = 10 * time.Second
	defaultRequestTimeout = 10 * time.Second
	defaultSessionTimeout = 10 * time.Second
	defaultCloseTimeout   = 2 * time.Second
)

// withDefaults returns a copy of o with defaults filled in, or an error
// wrapping backend.ErrInvalidOption.
func (o *Options) withDefaults() (Options, error) {
	var out Options
	if o != nil {
		out = *o
		out.Seeds = append([]string(nil), o.Seeds...)
	}
	if len(out.Seeds) == 0 {
		return out, fmt.Errorf("%w: no broker address", backend.ErrInvalidOption)
	}
	for _, s := range out.Seeds {
		if _, _, err := net.SplitHostPort(s); err != nil {
			return out, fmt.Errorf("%w: broker address %q is not host:port", backend.ErrInvalidOption, s)
		}
	}
	if out.ClientID == "" {
		out.ClientID = defaultClientID
	}
	switch out.SASL {
	case "":
		if out.User != "" || out.Password != "" {
			return out, fmt.Errorf("%w: a user or password without a SASL mechanism (sasl=plain, scram-sha-256 or scram-sha-512)", backend.ErrInvalidOption)
		}
	case "plain", "scram-sha-256", "scram-sha-512":
		if out.User == "" {
			return out, fmt.Errorf("%w: SASL %s needs a user", backend.ErrInvalidOption, out.SASL)
		}
	default:
		return out, fmt.Errorf("%w: SASL mechanism %q, want plain, scram-sha-256 or scram-sha-512", backend.ErrInvalidOption, out.SASL)
	}
	if out.Dial != nil && out.TLS != nil {
		return out, fmt.Errorf("%w: Dial and TLS together", backend.ErrInvalidOption)
	}
	if out.Partitions < 0 || out.Partitions > 10000 {
		return out, fmt.Errorf("%w: partitions %d, want 0 to 10000", backend.ErrInvalidOption, out.Partitions)
	}
	for _, f := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
		min  time.Duration
	}{
		{"dial timeout", &out.DialTimeout, defaultDialTimeout, 10 * time.Millisecond},
		{"request timeout", &out.RequestTimeout, defaultRequestTimeout, 100 * time.Millisecond},
		{"session timeout", &out.SessionTimeout, defaultSessionTimeout, time.Second},
		{"close timeout", &out.CloseTimeout, defaultCloseTimeout, 10 * time.Millisecond},
	} {
		if *f.v == 0 {
			*f.v = f.def
		}
		if *f.v < f.min {
			return out, fmt.Errorf("%w: %s %v, want at least %v", backend.ErrInvalidOption, f.name, *f.v, f.min)
		}
	}
	return out, nil
}
