package rabbitmq

import (
	"crypto/tls"
	"fmt"
	"time"

	"github.com/eventbus-go/bus/backend"
)

// Options configures a Backend. A nil *Options means every default. Every
// field's default is documented on it; every value is validated by New.
type Options struct {
	// Prefix starts every exchange and queue name the backend declares
	// (default "bus"): "<prefix>.t.<topic>", "<prefix>.q.<topic>/<group>",
	// "<prefix>.hold.<ms>".
	Prefix string
	// Heartbeat is the AMQP heartbeat interval (default 5s, at least 1s):
	// a dead connection is noticed within about two of them.
	Heartbeat time.Duration
	// DialTimeout bounds the TCP connect and the AMQP handshake of a
	// connection (default 10s), and how long the broker may take to open
	// a channel whose caller went before the connection counts as dead.
	DialTimeout time.Duration
	// WriteTimeout bounds each write to the socket (default 10s): a write
	// that cannot go out within it closes the connection, so that no call
	// waits on a dead network for longer.
	WriteTimeout time.Duration
	// CloseTimeout bounds Close of a subscription and of the backend
	// (default 2s); past it the socket is closed without the AMQP
	// goodbye.
	CloseTimeout time.Duration
	// TLS is the TLS configuration of amqps:// connections (default: the
	// host's roots, the URL's host as the server name).
	TLS *tls.Config
	// Management is the base URL of the broker's management API (the
	// rabbitmq_management plugin), for example "http://127.0.0.1:15672",
	// which inspection (backend.Inspector) reads. Its user and password
	// are the AMQP URL's unless it carries its own. Empty (the default):
	// inspection is unsupported.
	Management string
}

const (
	defaultPrefix       = "bus"
	defaultHeartbeat    = 5 * time.Second
	defaultDialTimeout  = 10 * time.Second
	defaultWriteTimeout = 10 * time.Second
	defaultCloseTimeout = 2 * time.Second
)

// withDefaults returns a copy of o with defaults filled in, or an error
// wrapping backend.ErrInvalidOption.
func (o *Options) withDefaults() (Options, error) {
	var out Options
	if o != nil {
		out = *o
	}
	if out.Prefix == "" {
		out.Prefix = defaultPrefix
	}
	if err := backend.ValidateTopic(out.Prefix); err != nil || len(out.Prefix) > 32 {
		return out, fmt.Errorf("%w: prefix %q: 1 to 32 letters, digits, '.', '_', '-' or ':'", backend.ErrInvalidOption, out.Prefix)
	}
	if out.Management != "" {
		if err := checkManagement(out.Management); err != nil {
			return out, err
		}
	}
	for _, f := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
		min  time.Duration
	}{
		{"heartbeat", &out.Heartbeat, defaultHeartbeat, time.Second},
		{"dial timeout", &out.DialTimeout, defaultDialTimeout, 10 * time.Millisecond},
		{"write timeout", &out.WriteTimeout, defaultWriteTimeout, 10 * time.Millisecond},
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
