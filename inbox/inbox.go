package inbox

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/eventbus-go/bus"
)

// Handler handles a delivery inside tx, the inbox's transaction: its
// writes commit together with the row that marks the message processed.
// It must not commit or roll back tx, and must not settle d.
type Handler[T any] func(ctx context.Context, tx T, d *bus.Delivery) error

// Inbox runs handlers in a PostgreSQL transaction that records the
// message as processed, so that a message's database effects are applied
// once however often it is delivered. T is the transaction type its
// handlers get: pgx.Tx (New) or *sql.Tx (NewSQL). An Inbox is safe for
// concurrent use.
type Inbox[T any] struct {
	db database[T]
	o  options
}

// New returns an Inbox whose handlers run in pgx transactions on pool.
// The tables must exist (see Migrate). It returns an error wrapping
// bus.ErrInvalidOption for a nil pool or an invalid option.
func New(pool *pgxpool.Pool, opts ...Option) (*Inbox[pgx.Tx], error) {
	if pool == nil {
		return nil, fmt.Errorf("inbox: %w: nil pool", bus.ErrInvalidOption)
	}
	o, err := newOptions(opts)
	if err != nil {
		return nil, fmt.Errorf("inbox: %w", err)
	}
	return &Inbox[pgx.Tx]{db: pgxDB{pool: pool, opts: pgx.TxOptions{IsoLevel: o.isolation.pgx()}}, o: o}, nil
}

// NewSQL returns an Inbox whose handlers run in database/sql
// transactions on db, whatever its PostgreSQL driver. The tables must
// exist (see Migrate and SQL). It returns an error wrapping
// bus.ErrInvalidOption for a nil db or an invalid option.
func NewSQL(db *sql.DB, opts ...Option) (*Inbox[*sql.Tx], error) {
	if db == nil {
		return nil, fmt.Errorf("inbox: %w: nil db", bus.ErrInvalidOption)
	}
	o, err := newOptions(opts)
	if err != nil {
		return nil, fmt.Errorf("inbox: %w", err)
	}
	return &Inbox[*sql.Tx]{db: sqlDB{db: db, opts: sql.TxOptions{Isolation: o.isolation.sql()}}, o: o}, nil
}

// claimSQL inserts the inbox row of a delivery. It affects no row when
// the row exists; while another transaction holds an uncommitted row of
// the same message, it waits for that transaction to end.
const claimSQL = `INSERT INTO bus_inbox (topic, group_name, id) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`

// Handle returns a bus handler that runs h exactly once per message and
// group, as far as h's effects in tx go:
//
//  1. it begins a transaction and inserts the delivery's row (topic,
//     group, message ID) into bus_inbox;
//  2. if the row was there (a redelivery of a message whose transaction
//     committed) it rolls back and returns nil, without running h;
//  3. otherwise it runs h; if h returns an error (or panics) it rolls
//     back and returns the error unchanged, so the bus retries or
//     dead-letters as usual (bus.Reject, bus.Nack and bus.Snooze keep
//     their meaning), and the redelivery runs h again;
//  4. otherwise it commits and returns nil. If the process dies or the
//     ack is lost after the commit, the redelivery finds the row (step 2).
//
// Two deliveries of one message that race (a redelivery after a lease
// ran out while the first still runs) do not both run h: the second's
// insert waits on the first's row until the first transaction ends.
//
// The returned handler settles nothing itself: in AckOnSuccess (the
// default) the bus acks when it returns nil; in AckManual, ack when it
// returns nil. With AckOnReceive the bus acks before the handler runs, so
// a failed transaction is not retried. A delivery without topic, group or
// ID gets an error marked with bus.Reject, before any I/O. Handle panics if
// h is nil.
func (in *Inbox[T]) Handle(h Handler[T]) bus.Handler {
	if h == nil {
		panic("inbox: Handle with nil handler")
	}
	return func(ctx context.Context, d *bus.Delivery) error {
		return in.handle(ctx, d, h)
	}
}

func (in *Inbox[T]) handle(ctx context.Context, d *bus.Delivery, h Handler[T]) (err error) {
	if d.Topic == "" || d.Group == "" || d.ID == "" {
		return bus.Reject(fmt.Errorf("inbox: %w: delivery without topic, group or ID (%q, %q, %q)",
			bus.ErrInvalidMessage, d.Topic, d.Group, d.ID))
	}
	tx, err := in.db.begin(ctx)
	if err != nil {
		return fmt.Errorf("inbox: %q: begin: %w", d.ID, err)
	}
	ended := false
	defer func() {
		if !ended { // an error, or h panicked
			in.db.rollback(ctx, tx)
		}
	}()
	n, err := in.db.exec(ctx, tx, claimSQL, d.Topic, d.Group, d.ID)
	if err != nil {
		return fmt.Errorf("inbox: %q: record: %w", d.ID, err)
	}
	if n == 0 {
		// Processed by an earlier delivery whose transaction committed.
		ended = true
		in.db.rollback(ctx, tx)
		return nil
	}
	if err := h(ctx, tx, d); err != nil {
		return err
	}
	ended = true
	if err := in.db.commit(ctx, tx); err != nil {
		// The commit may have happened: the redelivery finds out.
		return fmt.Errorf("inbox: %q: commit: %w", d.ID, err)
	}
	return nil
}

// Processed reports whether the message id of topic was recorded as
// processed by group, and when (the start of its transaction).
func (in *Inbox[T]) Processed(ctx context.Context, topic, group, id string) (at time.Time, ok bool, err error) {
	at, ok, err = in.db.timeRow(ctx,
		`SELECT processed_at FROM bus_inbox WHERE topic = $1 AND group_name = $2 AND id = $3`, topic, group, id)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("inbox: processed %q: %w", id, err)
	}
	return at, ok, nil
}
