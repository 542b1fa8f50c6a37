package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/observer"
)

// minBackoff is the first wait after a failure; it doubles up to the poll
// interval.
const minBackoff = 50 * time.Millisecond

// Relay publishes committed outbox rows to a bus. It is safe for
// concurrent use; Close stops it.
type Relay struct {
	cfg *pgx.ConnConfig
	pub bus.Publisher
	o   options
	m   *metrics

	cancel context.CancelFunc
	done   chan struct{}

	connOutage, pubOutage observer.Outage
}

// NewRelay validates its arguments (before any I/O) and starts a relay
// that publishes the rows of the outbox table in the database at dbURL
// (a postgres:// URL or key=value string, as pgx takes) to pub, until
// Close. It connects in the background, and reconnects after a failure
// with a back-off capped by the poll interval; the errors go to the
// observer. Several relays may run against one database: they share the
// partitions (see the package doc).
func NewRelay(dbURL string, pub bus.Publisher, opts ...Option) (*Relay, error) {
	o := options{batch: DefaultBatchSize, poll: DefaultPollInterval}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, fmt.Errorf("outbox: new relay: %w", err)
		}
	}
	if o.obs == nil {
		o.obs = observer.Slog(slog.Default())
	}
	if pub == nil {
		return nil, fmt.Errorf("outbox: new relay: %w: nil publisher", bus.ErrInvalidOption)
	}
	cfg, err := pgx.ParseConfig(dbURL)
	if err != nil {
		return nil, fmt.Errorf("outbox: new relay: %w: database URL: %w", bus.ErrInvalidOption, err)
	}
	m, err := newMetrics(o.mp)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Relay{cfg: cfg, pub: pub, o: o, m: m, cancel: cancel, done: make(chan struct{})}
	go r.run(ctx)
	return r, nil
}

// Close stops the relay: it stops reading rows, abandons a publish in
// flight (its rows stay in the table and are published again, once, by
// the bus's idempotent publish), releases its partitions and returns when
// the relay has stopped or when ctx ends, whichever comes first.
func (r *Relay) Close(ctx context.Context) error {
	r.cancel()
	select {
	case <-r.done:
		return r.m.reg.Unregister()
	case <-ctx.Done():
		return fmt.Errorf("outbox: close relay: %w", context.Cause(ctx))
	}
}

// run keeps a session to the database until the relay closes.
func (r *Relay) run(ctx context.Context) {
	defer close(r.done)
	delay := minBackoff
	for ctx.Err() == nil {
		connected, err := r.session(ctx)
		if ctx.Err() != nil {
			return
		}
		if connected {
			delay = minBackoff
		}
		r.connOutage.Fail(ctx, r.o.obs, observer.Event{Scope: observer.ScopeConnection}, fmt.Errorf("outbox: relay: %w", err))
		sleep(ctx, jitter(delay))
		delay = min(2*delay, r.o.poll)
	}
}

// session connects, joins the relays and relays until an error.
func (r *Relay) session(ctx context.Context) (connected bool, err error) {
	conn, err := pgx.ConnectConfig(ctx, r.cfg)
	if err != nil {
		return false, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = conn.Close(cctx) // ends the session: its partition locks go with it
	}()
	// The relay's deletes need not wait for the disk: a delete lost in a
	// crash only publishes its rows again, which the bus stores once.
	setup := fmt.Sprintf("SET synchronous_commit = off; LISTEN bus_outbox; SELECT pg_advisory_lock_shared(%d, 0)", lockMembers)
	if _, err := conn.Exec(ctx, setup); err != nil {
		return false, err
	}
	r.connOutage.Recover(ctx, r.o.obs, observer.Event{Scope: observer.ScopeConnection})
	s := &session{r: r, conn: conn, delay: minBackoff}
	err = s.loop(ctx)
	if ctx.Err() != nil {
		// Closing: delete what went out, so that a relay started after the
		// dedup window does not publish it again.
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = s.settle(sctx, s.unsettled)
	}
	return true, err
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// jitter is d plus up to half of d, so that relays do not retry in step.
func jitter(d time.Duration) time.Duration {
	return d + rand.N(d/2+1)
}

// isPermanent reports whether a publish error is one that no retry fixes:
// the bus refused the topic or the messages before any I/O.
func isPermanent(err error) bool {
	return errors.Is(err, bus.ErrInvalidTopic) || errors.Is(err, bus.ErrInvalidMessage) ||
		errors.Is(err, bus.ErrPayloadTooLarge) || errors.Is(err, bus.ErrUnsupported)
}
