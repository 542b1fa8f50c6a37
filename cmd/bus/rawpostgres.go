package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/eventbus-go/bus/internal/rawclient"
	"github.com/eventbus-go/bus/internal/urlopt"
	"github.com/eventbus-go/bus/postgres"
)

// pgTarget is the baseline of postgres:// and postgresql://: pgx on a
// table of its own (rawclient.PGQueue). Each publisher inserts its batch,
// each message with an ID, with one INSERT; one reader leases up to
// max-in-flight rows with an UPDATE ... FOR UPDATE SKIP LOCKED, handles
// them and deletes them with one DELETE per fetch, polling every
// millisecond when the table is empty.
type pgTarget struct {
	r  *benchRun
	u  *url.URL
	be *postgres.Backend // opened from the URL only for its pool
	q  *rawclient.PGQueue
}

// pgRawPoll is how often the raw reader polls an empty table.
const pgRawPoll = time.Millisecond

// openPGTarget takes the pool as the bus would open it: the URL goes
// through the backend's own parser, and the raw side uses that backend's
// pool and nothing else of it.
func openPGTarget(ctx context.Context, r *benchRun) (target, error) {
	u, err := url.Parse(r.cfg.URL)
	if err != nil {
		return nil, urlopt.ParseError(r.cfg.URL)
	}
	be, err := postgres.OpenURL(ctx, u)
	if err != nil {
		return nil, fmt.Errorf("baseline: %w", err)
	}
	q := &rawclient.PGQueue{Pool: be.Pool(), Table: fmt.Sprintf("bus_bench_rawq_%x", r.nonce), Count: r.cfg.MaxInFlight, PollEvery: pgRawPoll}
	if err := q.Create(ctx); err != nil {
		return nil, errors.Join(fmt.Errorf("baseline: create the table: %w", urlopt.RedactError(err, u)), be.Close())
	}
	return &pgTarget{r: r, u: u, be: be, q: q}, nil
}

func (t *pgTarget) backend() string { return "postgres" }

func (t *pgTarget) client() string { return "pgx" }

// prepare has nothing to do: the table exists from the start, and the
// queue has no groups.
func (t *pgTarget) prepare(context.Context, string) error { return nil }

type pgPublisher struct{ t *pgTarget }

func (t *pgTarget) publisher(context.Context) (publisher, error) { return pgPublisher{t}, nil }

func (p pgPublisher) publish(ctx context.Context, payloads [][]byte) error {
	if err := p.t.q.Publish(ctx, payloads); err != nil {
		return urlopt.RedactError(err, p.t.u)
	}
	return nil
}

func (t *pgTarget) subscribe(_ context.Context, h func([]byte)) (consumer, error) {
	return startLoopConsumer(func(ctx context.Context) error {
		if err := t.q.Run(ctx, h); err != nil {
			return fmt.Errorf("baseline: %w", urlopt.RedactError(err, t.u))
		}
		return nil
	}), nil
}

// close drops the table and closes the pool.
func (t *pgTarget) close(ctx context.Context) error {
	err := t.q.Drop(ctx)
	if err != nil {
		err = fmt.Errorf("baseline: drop %s: %w", t.q.Table, urlopt.RedactError(err, t.u))
	}
	return errors.Join(err, t.be.Close())
}
