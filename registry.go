package bus

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/inmemory"
	"github.com/eventbus-go/bus/internal/registry"
	"github.com/eventbus-go/bus/internal/urlopt"
)

func init() {
	Register("mem", func(_ context.Context, u *url.URL) (backend.Backend, error) {
		return inmemory.OpenURL(u)
	})
}

// Register makes a backend available to Open under a URL scheme: open
// opens the backend from a URL and must not keep ctx. Backends call it
// from init. It panics if open is nil or the scheme is taken.
func Register(scheme string, open func(ctx context.Context, u *url.URL) (Backend, error)) {
	registry.Add(scheme, open)
}

// Open opens the backend named by rawURL's scheme ("mem://",
// "redis://...", "nats://...", "postgres://...") and returns a Bus over it. Backends other
// than mem must be linked in, usually with a blank import of their
// package. The URL is redacted in errors.
func Open(ctx context.Context, rawURL string, opts ...Option) (*Bus, error) {
	if !strings.Contains(rawURL, "://") && !strings.HasPrefix(rawURL, "mem:") {
		return nil, fmt.Errorf("bus: open: %w: unknown backend scheme: %w", ErrInvalidOption, urlopt.MissingScheme(rawURL, registry.Schemes()))
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("bus: open: %w", urlopt.ParseError(rawURL))
	}
	open, ok := registry.Lookup(u.Scheme)
	if !ok {
		hint := ""
		if pkg := firstPartyPackages[u.Scheme]; pkg != "" {
			hint = fmt.Sprintf("; import _ %q", pkg)
		}
		return nil, fmt.Errorf("bus: open %q: %w: unknown backend scheme %q (known: %v%s)", redactURL(u), ErrInvalidOption, u.Scheme, registry.Schemes(), hint)
	}
	if err := urlopt.CheckForm(u, false); err != nil {
		return nil, fmt.Errorf("bus: open: %w", err)
	}
	o, err := buildBusOptions(opts)
	if err != nil {
		return nil, err
	}
	be, err := open(ctx, u)
	if err != nil {
		return nil, fmt.Errorf("bus: open %q: %w", redactURL(u), err)
	}
	return newBus(be, o), nil
}

// firstPartyPackages names the package that registers each scheme of the
// backends that ship with the bus, for the error of an unknown scheme.
var firstPartyPackages = map[string]string{
	"redis":      "github.com/eventbus-go/bus/redisstream",
	"rediss":     "github.com/eventbus-go/bus/redisstream",
	"nats":       "github.com/eventbus-go/bus/nats",
	"tls":        "github.com/eventbus-go/bus/nats",
	"nats+tls":   "github.com/eventbus-go/bus/nats",
	"postgres":   "github.com/eventbus-go/bus/postgres",
	"postgresql": "github.com/eventbus-go/bus/postgres",
}

// redactURL hides credentials (see urlopt.Redact).
func redactURL(u *url.URL) string { return urlopt.Redact(u) }
