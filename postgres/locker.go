package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/eventbus-go/bus/backend"
)

var (
	_ backend.GroupLocker = (*Backend)(nil)
	_ backend.Partitioner = (*Backend)(nil)
)

// lockGroupSQL takes or renews the lock of group $2 on topic $1 for
// holder $3 until $4 ms from now, in one statement: the row is read and
// locked (old, which the insert reads first) before it is written, so two
// callers are ordered and the previous holder is known. It returns whether $3
// holds the lock and whether it took it from a holder whose lock ran out.
const lockGroupSQL = `WITH old AS (
    SELECT holder, until FROM bus_locks WHERE topic = $1 AND grp = $2 FOR UPDATE),
up AS (
    INSERT INTO bus_locks (topic, grp, holder, until)
    SELECT $1, $2, $3, clock_timestamp() + $4::bigint * interval '1 millisecond' FROM (SELECT count(*) FROM old) o
    ON CONFLICT (topic, grp) DO UPDATE SET holder = excluded.holder, until = excluded.until
    WHERE bus_locks.holder = excluded.holder OR bus_locks.until <= clock_timestamp()
    RETURNING holder)
SELECT EXISTS (SELECT 1 FROM up),
       EXISTS (SELECT 1 FROM up) AND EXISTS (SELECT 1 FROM old WHERE old.holder <> $3)`

// LockGroup implements backend.GroupLocker with a row of bus_locks whose
// until the server's clock judges.
func (b *Backend) LockGroup(ctx context.Context, topic, group, holder string, ttl time.Duration) (held, takeover bool, err error) {
	if b.shut.Load() {
		return false, false, fmt.Errorf("postgres: lock group %q of %q: %w", group, topic, backend.ErrClosed)
	}
	err = b.pool.QueryRow(ctx, lockGroupSQL, topic, group, holder, max(ttl.Milliseconds(), 1)).Scan(&held, &takeover)
	if err != nil {
		return false, false, fmt.Errorf("postgres: lock group %q of %q: %w", group, topic, classify(err))
	}
	return held, takeover, nil
}

// UnlockGroup implements backend.GroupLocker.
func (b *Backend) UnlockGroup(ctx context.Context, topic, group, holder string) error {
	if _, err := b.pool.Exec(ctx, `DELETE FROM bus_locks WHERE topic = $1 AND grp = $2 AND holder = $3`, topic, group, holder); err != nil {
		return fmt.Errorf("postgres: unlock group %q of %q: %w", group, topic, classify(err))
	}
	return nil
}

// Partitions implements backend.Partitioner: the count is a column of
// bus_topics, set when it is 0.
func (b *Backend) Partitions(ctx context.Context, topic string, n int) (int, error) {
	if b.shut.Load() {
		return 0, fmt.Errorf("postgres: partitions of %q: %w", topic, backend.ErrClosed)
	}
	var got int
	var err error
	if n <= 0 {
		err = b.pool.QueryRow(ctx, `SELECT partitions FROM bus_topics WHERE name = $1`, topic).Scan(&got)
		if errors.Is(err, pgx.ErrNoRows) {
			return 0, nil
		}
	} else {
		err = b.pool.QueryRow(ctx, `INSERT INTO bus_topics (name, partitions) VALUES ($1, $2)
    ON CONFLICT (name) DO UPDATE SET partitions = CASE WHEN bus_topics.partitions = 0 THEN excluded.partitions ELSE bus_topics.partitions END
    RETURNING partitions`, topic, n).Scan(&got)
	}
	if err != nil {
		return 0, fmt.Errorf("postgres: partitions of %q: %w", topic, classify(err))
	}
	return got, nil
}

// Heartbeat implements backend.Partitioner.
func (b *Backend) Heartbeat(ctx context.Context, topic, group, member string, ttl time.Duration) ([]string, error) {
	if b.shut.Load() {
		return nil, fmt.Errorf("postgres: heartbeat of group %q on %q: %w", group, topic, backend.ErrClosed)
	}
	batch := &pgx.Batch{}
	batch.Queue(`INSERT INTO bus_members (topic, grp, member, until) VALUES ($1, $2, $3, clock_timestamp() + $4::bigint * interval '1 millisecond')
    ON CONFLICT (topic, grp, member) DO UPDATE SET until = excluded.until`, topic, group, member, max(ttl.Milliseconds(), 1))
	batch.Queue(membersSQL, topic, group)
	br := b.pool.SendBatch(ctx, batch)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, fmt.Errorf("postgres: heartbeat of group %q on %q: %w", group, topic, classify(err))
	}
	ms, err := scanMembers(br.Query())
	if err != nil {
		return nil, fmt.Errorf("postgres: heartbeat of group %q on %q: %w", group, topic, classify(err))
	}
	return ms, nil
}

// membersSQL deletes the members of group $2 on topic $1 that lapsed and
// returns the others, sorted.
const membersSQL = `WITH gone AS (DELETE FROM bus_members WHERE topic = $1 AND grp = $2 AND until <= clock_timestamp())
SELECT member FROM bus_members WHERE topic = $1 AND grp = $2 AND until > clock_timestamp() ORDER BY member COLLATE "C"`

func scanMembers(rows pgx.Rows, err error) ([]string, error) {
	if err != nil {
		return nil, err
	}
	ms, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if ms == nil {
		ms = []string{}
	}
	return ms, err
}

// Members implements backend.Partitioner.
func (b *Backend) Members(ctx context.Context, topic, group string) ([]string, error) {
	ms, err := scanMembers(b.pool.Query(ctx, membersSQL, topic, group))
	if err != nil {
		return nil, fmt.Errorf("postgres: members of group %q on %q: %w", group, topic, classify(err))
	}
	return ms, nil
}

// Leave implements backend.Partitioner.
func (b *Backend) Leave(ctx context.Context, topic, group, member string) error {
	if _, err := b.pool.Exec(ctx, `DELETE FROM bus_members WHERE topic = $1 AND grp = $2 AND member = $3`, topic, group, member); err != nil {
		return fmt.Errorf("postgres: leave group %q on %q: %w", group, topic, classify(err))
	}
	return nil
}
