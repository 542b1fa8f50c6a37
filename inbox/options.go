package inbox

import (
	"database/sql"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/eventbus-go/bus"
)

// DefaultPruneBatch is how many rows one statement of Prune deletes by
// default.
const DefaultPruneBatch = 1000

// Isolation is the isolation level of the handler's transaction.
type Isolation int

const (
	// ReadCommitted is PostgreSQL's default level, and the inbox's. A
	// concurrent duplicate waits on the inbox row and, once the first
	// transaction commits, is acked without running.
	ReadCommitted Isolation = iota + 1
	// RepeatableRead: a concurrent duplicate fails with a serialization
	// error once the first commits; the bus retries it, and the retry is
	// acked without running.
	RepeatableRead
	// Serializable: as RepeatableRead, and the handler's own reads and
	// writes are serializable.
	Serializable
)

// String returns "read committed", "repeatable read" or "serializable".
func (l Isolation) String() string {
	switch l {
	case ReadCommitted:
		return "read committed"
	case RepeatableRead:
		return "repeatable read"
	case Serializable:
		return "serializable"
	}
	return fmt.Sprintf("Isolation(%d)", int(l))
}

func (l Isolation) pgx() pgx.TxIsoLevel {
	switch l {
	case RepeatableRead:
		return pgx.RepeatableRead
	case Serializable:
		return pgx.Serializable
	}
	return pgx.ReadCommitted
}

func (l Isolation) sql() sql.IsolationLevel {
	switch l {
	case RepeatableRead:
		return sql.LevelRepeatableRead
	case Serializable:
		return sql.LevelSerializable
	}
	return sql.LevelReadCommitted
}

// Option configures an Inbox.
type Option func(*options) error

type options struct {
	isolation  Isolation
	pruneBatch int
}

func newOptions(opts []Option) (options, error) {
	o := options{isolation: ReadCommitted, pruneBatch: DefaultPruneBatch}
	for _, opt := range opts {
		if opt == nil {
			return o, fmt.Errorf("%w: nil inbox option", bus.ErrInvalidOption)
		}
		if err := opt(&o); err != nil {
			return o, err
		}
	}
	return o, nil
}

// WithIsolation sets the isolation level of the handler's transaction
// (default ReadCommitted).
func WithIsolation(l Isolation) Option {
	return func(o *options) error {
		if l < ReadCommitted || l > Serializable {
			return fmt.Errorf("%w: inbox isolation %v", bus.ErrInvalidOption, l)
		}
		o.isolation = l
		return nil
	}
}

// WithPruneBatch sets how many rows one statement of Prune deletes
// (default DefaultPruneBatch, 1 to 100000). Each statement is a
// transaction of its own, so a batch bounds how long Prune holds row
// locks and how much it writes at once.
func WithPruneBatch(n int) Option {
	return func(o *options) error {
		if n < 1 || n > 100000 {
			return fmt.Errorf("%w: inbox prune batch %d, want 1 to 100000", bus.ErrInvalidOption, n)
		}
		o.pruneBatch = n
		return nil
	}
}
