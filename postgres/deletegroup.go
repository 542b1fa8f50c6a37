package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/eventbus-go/bus/backend"
)

var _ backend.GroupDeleter = (*Backend)(nil)

// DeleteGroup implements backend.GroupDeleter in one transaction, under
// the topic's exclusive lock (as SeekGroup): the group's delivery rows
// and leases, its row of bus_groups (its cursor) and its group lock. The
// messages only it held back are trimmed by the next trim. A member
// still fetching for the group finds nothing more; the bus deletes a
// broadcast group only after its member closed or stopped renewing the
// group's lease.
func (b *Backend) DeleteGroup(ctx context.Context, topic, group string) error {
	if b.shut.Load() {
		return fmt.Errorf("postgres: delete group %q of %q: %w", group, topic, backend.ErrClosed)
	}
	err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, $2)`, lockTopic, topicLock(topic)); err != nil {
			return err
		}
		for _, q := range []string{
			`DELETE FROM bus_deliveries WHERE group_id IN (SELECT id FROM bus_groups WHERE topic = $1 AND name = $2)`,
			`DELETE FROM bus_leases WHERE group_id IN (SELECT id FROM bus_groups WHERE topic = $1 AND name = $2)`,
			`DELETE FROM bus_groups WHERE topic = $1 AND name = $2`,
			`DELETE FROM bus_locks WHERE topic = $1 AND grp = $2`,
		} {
			if _, err := tx.Exec(ctx, q, topic, group); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("postgres: delete group %q of %q: %w", group, topic, classify(err))
	}
	return nil
}
