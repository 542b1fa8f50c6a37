package inbox

import (
	"context"
	"fmt"
	"time"

	"github.com/eventbus-go/bus"
)

// pruneSQL deletes at most $2 rows processed before $1, oldest first,
// skipping rows another pruner is deleting.
const pruneSQL = `WITH old AS (
	SELECT ctid FROM bus_inbox WHERE processed_at < $1 ORDER BY processed_at LIMIT $2 FOR UPDATE SKIP LOCKED)
DELETE FROM bus_inbox WHERE ctid IN (SELECT ctid FROM old)`

// Prune deletes the rows of messages processed more than retention ago,
// by the database's clock, and returns how many it deleted. It deletes
// in statements of at most the prune batch (WithPruneBatch), each a
// transaction of its own, until no row older than the cutoff (fixed when
// Prune starts) is left or ctx ends; rows it deleted before ctx ended stay
// deleted. Several Prune calls may run at once.
//
// A message whose row was pruned is handled again if it is delivered
// again, so retention must exceed the longest time a message can still
// reach the group after its transaction committed (see the package doc:
// the lease, the retries, and how long a consumer may be down). Prune
// refuses a retention under a minute with an error wrapping
// bus.ErrInvalidOption.
func (in *Inbox[T]) Prune(ctx context.Context, retention time.Duration) (int64, error) {
	if retention < time.Minute {
		return 0, fmt.Errorf("inbox: prune: %w: retention %v, want at least 1m", bus.ErrInvalidOption, retention)
	}
	cutoff, _, err := in.db.timeRow(ctx, `SELECT now() - $1::float8 * interval '1 second'`, retention.Seconds())
	if err != nil {
		return 0, fmt.Errorf("inbox: prune: %w", err)
	}
	var total int64
	for {
		n, err := in.db.execPool(ctx, pruneSQL, cutoff, in.o.pruneBatch)
		total += n
		if err != nil {
			return total, fmt.Errorf("inbox: prune: %w", err)
		}
		if n < int64(in.o.pruneBatch) {
			return total, nil
		}
	}
}
