package outbox

import (
	"fmt"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/observer"
)

// Defaults of the relay's options.
const (
	DefaultBatchSize    = 500
	DefaultPollInterval = time.Second
)

// Option configures a Relay.
type Option func(*options) error

type options struct {
	batch int
	poll  time.Duration
	obs   observer.Observer
	mp    metric.MeterProvider
}

// WithBatchSize sets how many rows the relay reads, publishes and deletes
// at a time (default DefaultBatchSize, 1 to 10000).
func WithBatchSize(n int) Option {
	return func(o *options) error {
		if n < 1 || n > 10000 {
			return fmt.Errorf("%w: outbox batch size %d, want 1 to 10000", bus.ErrInvalidOption, n)
		}
		o.batch = n
		return nil
	}
}

// WithPollInterval sets how often the relay looks for rows when no
// notification woke it, and for partitions another relay left (default
// DefaultPollInterval, at least 10ms). It also caps the back-off after a
// failure.
func WithPollInterval(d time.Duration) Option {
	return func(o *options) error {
		if d < 10*time.Millisecond {
			return fmt.Errorf("%w: outbox poll interval %v, want at least 10ms", bus.ErrInvalidOption, d)
		}
		o.poll = d
		return nil
	}
}

// WithObserver sets where the relay reports the errors it handles (the
// database connection, a failed publish, a row moved to the dead table).
// The default is observer.Slog(slog.Default()).
func WithObserver(obs observer.Observer) Option {
	return func(o *options) error {
		if obs == nil {
			return fmt.Errorf("%w: nil observer", bus.ErrInvalidOption)
		}
		o.obs = obs
		return nil
	}
}

// WithMeterProvider sets the OpenTelemetry meter provider of the relay's
// metrics (default the global one).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(o *options) error {
		if mp == nil {
			return fmt.Errorf("%w: nil meter provider", bus.ErrInvalidOption)
		}
		o.mp = mp
		return nil
	}
}
