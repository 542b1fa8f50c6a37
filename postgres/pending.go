package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/eventbus-go/bus/backend"
)

var _ backend.PendingLister = (*subscription)(nil)

// pendingSQL lists what a group has handed out and not settled, in log
// order ((ord, seq)): the delivery rows delivered at least once (leased,
// given back or nacked; a first delivery waiting for its DeliverAt was
// never handed out), and the seqs still pending in the leases of first
// deliveries, each with its message's ID and key and when it may be
// fetched again. $1 group id, $2 topic, $3 limit. p is materialized so
// that each of its rows looks its message up by the primary key: inlined,
// the planner may scan the topic's messages and run p once for each.
const pendingSQL = `WITH p AS MATERIALIZED (
	SELECT d.seq, d.ord, d.visible_at FROM bus_deliveries d
	WHERE d.group_id = $1 AND (d.n > 0 OR d.leased)
	UNION ALL
	SELECT u.seq, u.ord, l.visible_at FROM bus_leases l, unnest(l.fetched, l.ords) AS u(seq, ord)
	WHERE l.group_id = $1 AND u.seq = ANY (l.pending)
)
SELECT m.id, m.key, p.visible_at FROM p
JOIN bus_messages m ON m.topic = $2 AND m.ord = p.ord AND m.seq = p.seq
ORDER BY p.ord, p.seq LIMIT $3`

// PendingDeliveries implements backend.PendingLister with one statement
// (pendingSQL). The list is exact; a lease end is the row's or lease's
// visible_at, by the server's clock.
func (s *subscription) PendingDeliveries(ctx context.Context, max int) ([]backend.Pending, bool, error) {
	if max < 1 {
		return nil, false, fmt.Errorf("postgres: pending deliveries of %q: %w: max %d", s.topic, ErrInvalidOption, max)
	}
	if s.closed.Load() {
		return nil, false, fmt.Errorf("postgres: pending deliveries of %q: %w", s.topic, backend.ErrClosed)
	}
	rows, err := s.b.pool.Query(ctx, pendingSQL, s.gid, s.topic, max+1)
	if err != nil {
		return nil, false, fmt.Errorf("postgres: pending deliveries of %q: %w", s.topic, classify(err))
	}
	defer rows.Close()
	var out []backend.Pending
	for rows.Next() {
		var id string
		var key []byte
		var at time.Time
		if err := rows.Scan(&id, &key, &at); err != nil {
			return nil, false, fmt.Errorf("postgres: pending deliveries of %q: %w", s.topic, classify(err))
		}
		out = append(out, backend.Pending{ID: id, Key: string(key), LeaseEnd: at})
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("postgres: pending deliveries of %q: %w", s.topic, classify(err))
	}
	if len(out) > max {
		return out[:max], false, nil
	}
	return out, true, nil
}
