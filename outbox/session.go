package outbox

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// session is one connection of a relay: it holds the relay's partition
// locks, and every read and delete of the relay goes through it, so a
// relay that lost its connection (and so its locks) can no longer touch
// the rows of its partitions.
type session struct {
	r     *Relay
	conn  *pgx.Conn
	owned []int16 // partitions this session holds the lock of

	// unsettled is what the last full batch published and has yet to
	// delete: the next read deletes it in the same round trip.
	unsettled outcome

	failing bool          // the last publish failed: retry after delay, not on notifications
	delay   time.Duration // the back-off while failing
}

// loop relays until ctx ends or the connection fails.
func (s *session) loop(ctx context.Context) error {
	var lastClaim time.Time
	for {
		if time.Since(lastClaim) >= s.r.o.poll {
			// Settle first: a partition given back has nothing in flight.
			if err := s.settle(ctx, s.unsettled); err != nil {
				return err
			}
			s.unsettled = outcome{}
			if err := s.claim(ctx); err != nil {
				return err
			}
			if err := s.measure(ctx); err != nil {
				return err
			}
			lastClaim = time.Now()
		}
		more, err := s.batch(ctx)
		if err != nil {
			return err
		}
		if more {
			continue
		}
		if s.failing {
			sleep(ctx, jitter(s.delay))
			s.delay = min(2*s.delay, s.r.o.poll)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			continue
		}
		s.delay = minBackoff
		if err := s.wait(ctx, s.r.o.poll-time.Since(lastClaim)); err != nil {
			return err
		}
	}
}

// wait returns on a notification (a transaction that wrote rows
// committed) or after d.
func (s *session) wait(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	_, err := s.conn.WaitForNotification(wctx)
	if err == nil || ctx.Err() == nil && (errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err)) {
		return nil
	}
	return err
}

// claim takes this relay's share of the partitions: ceil(Partitions /
// relays), where relays are the sessions that joined. It gives back what
// it holds beyond its share (between batches, so nothing of a given-back
// partition is in flight) and tries the free ones in a random order.
func (s *session) claim(ctx context.Context) error {
	var members int
	err := s.conn.QueryRow(ctx, `SELECT count(*) FROM pg_locks
		WHERE locktype = 'advisory' AND classid = $1 AND objid = 0 AND objsubid = 2 AND granted`,
		int64(lockMembers)).Scan(&members)
	if err != nil {
		return fmt.Errorf("count relays: %w", err)
	}
	share := (Partitions + max(members, 1) - 1) / max(members, 1)
	if extra := len(s.owned) - share; extra > 0 {
		give := s.owned[share:]
		if _, err := s.conn.Exec(ctx, "SELECT pg_advisory_unlock($1, p) FROM unnest($2::int[]) p", lockPartition, toInt32(give)); err != nil {
			return fmt.Errorf("release partitions: %w", err)
		}
		s.owned = s.owned[:share]
		return nil
	}
	if len(s.owned) == share {
		return nil
	}
	var free []int32
	for p := range int32(Partitions) {
		if !slices.Contains(s.owned, int16(p)) {
			free = append(free, p)
		}
	}
	rand.Shuffle(len(free), func(i, j int) { free[i], free[j] = free[j], free[i] })
	rows, err := s.conn.Query(ctx, "SELECT p FROM unnest($1::int[]) p WHERE pg_try_advisory_lock($2, p) LIMIT $3",
		free, lockPartition, share-len(s.owned))
	if err != nil {
		return fmt.Errorf("claim partitions: %w", err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[int16])
	if err != nil {
		return fmt.Errorf("claim partitions: %w", err)
	}
	s.owned = append(s.owned, got...)
	return nil
}

// measure records the backlog for the metrics. It never scans the whole
// table, which holds the dead versions of every deleted row until vacuum
// removes them: the oldest row comes from the primary key, and the rows
// from it on are counted through the same index.
func (s *session) measure(ctx context.Context) error {
	var first int64
	var oldest time.Time
	err := s.conn.QueryRow(ctx, "SELECT seq, created_at FROM bus_outbox ORDER BY seq LIMIT 1").Scan(&first, &oldest)
	if errors.Is(err, pgx.ErrNoRows) {
		s.r.m.setBacklog(0, time.Time{})
		return nil
	}
	if err != nil {
		return fmt.Errorf("measure backlog: %w", err)
	}
	// The bound as a literal, so that the plan is the index range scan.
	var n int64
	q := "SELECT count(*) FROM bus_outbox WHERE seq >= " + strconv.FormatInt(first, 10)
	if err := s.conn.QueryRow(ctx, q, pgx.QueryExecModeSimpleProtocol).Scan(&n); err != nil {
		return fmt.Errorf("measure backlog: %w", err)
	}
	s.r.m.setBacklog(n, oldest)
	return nil
}

func toInt32(ps []int16) []int32 {
	out := make([]int32, len(ps))
	for i, p := range ps {
		out[i] = int32(p)
	}
	return out
}
