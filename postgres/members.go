package postgres

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/eventbus-go/bus/backend"
)

// A Backend records each of its live subscriptions as a row of
// bus_members that lapses unless renewed, so that any process can count
// a group's members (GroupInfo.Consumers).
const (
	// memberBeat is how often a Backend renews the rows of its
	// subscriptions.
	memberBeat = 5 * time.Second
	// memberTTL is how long a row counts without renewal: a process that
	// dies without closing its subscriptions stops counting after it.
	memberTTL = 3 * memberBeat
	// memberBound bounds each statement of the renewals and removals.
	memberBound = 5 * time.Second
)

// memberTopic is the topic column of the rows of group gid's
// subscriptions: '#' is in no topic name (backend.ValidateTopic), so the
// rows never mix with the members of a partitioned group
// (backend.Partitioner), which bus_members also holds under the topic's
// name.
func memberTopic(gid int64) string { return "#" + strconv.FormatInt(gid, 10) }

// memberRow is one subscription's row of bus_members.
type memberRow struct {
	topic, group, member string
}

// members is a Backend's record of its live subscriptions.
type members struct {
	mu   sync.Mutex
	live map[*subscription]memberRow
	gone []memberRow   // closed, their rows not yet deleted
	kick chan struct{} // a subscription closed
}

func newMembers() *members {
	return &members{live: map[*subscription]memberRow{}, kick: make(chan struct{}, 1)}
}

// renewSQL deletes the subscription rows that lapsed (of any process) and
// writes or renews the rows ($1 topics, $2 groups, $3 members) until $4
// ms from now.
const (
	lapsedSQL = `DELETE FROM bus_members WHERE topic LIKE '#%' AND until <= clock_timestamp()`
	renewSQL  = `INSERT INTO bus_members (topic, grp, member, until)
SELECT t, g, m, clock_timestamp() + $4::bigint * interval '1 millisecond' FROM unnest($1::text[], $2::text[], $3::text[]) AS u(t, g, m)
ON CONFLICT (topic, grp, member) DO UPDATE SET until = excluded.until`
	leaveSQL = `DELETE FROM bus_members WHERE (topic, grp, member) IN (SELECT * FROM unnest($1::text[], $2::text[], $3::text[]))`
)

// join records s as a live member of its group and writes its row within
// ctx, so that it counts when Subscribe returns. A failed write is not
// Subscribe's failure: the next renewal writes the row.
func (b *Backend) join(ctx context.Context, s *subscription) {
	row := memberRow{topic: memberTopic(s.gid), group: s.cfg.Group, member: strconv.FormatUint(rand.Uint64(), 36)}
	b.members.mu.Lock()
	b.members.live[s] = row
	b.members.mu.Unlock()
	_ = b.writeMembers(ctx, renewSQL, []memberRow{row}, memberTTL.Milliseconds())
}

// leave drops s from the live members; the member loop deletes its row.
// It does no I/O.
func (b *Backend) leave(s *subscription) {
	b.members.mu.Lock()
	row, ok := b.members.live[s]
	if ok {
		delete(b.members.live, s)
		b.members.gone = append(b.members.gone, row)
	}
	b.members.mu.Unlock()
	if ok {
		select {
		case b.members.kick <- struct{}{}:
		default:
		}
	}
}

// memberLoop renews the rows of the live subscriptions every memberBeat
// and deletes those of closed ones as they close. When the Backend
// closes it deletes every row it wrote, within a second.
func (b *Backend) memberLoop(life context.Context) {
	t := time.NewTicker(memberBeat)
	defer t.Stop()
	for {
		select {
		case <-life.Done():
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			b.members.mu.Lock()
			rows := b.members.gone
			for _, row := range b.members.live {
				rows = append(rows, row)
			}
			b.members.mu.Unlock()
			_ = b.writeMembers(ctx, leaveSQL, rows, 0)
			return
		case <-b.members.kick:
			b.members.mu.Lock()
			gone := b.members.gone
			b.members.gone = nil
			b.members.mu.Unlock()
			ctx, cancel := context.WithTimeout(life, memberBound)
			if err := b.writeMembers(ctx, leaveSQL, gone, 0); err != nil {
				// Retried at the next renewal, or when the Backend
				// closes (which cancels ctx); the rows lapse meanwhile.
				b.members.mu.Lock()
				b.members.gone = append(b.members.gone, gone...)
				b.members.mu.Unlock()
			}
			cancel()
		case <-t.C:
			b.members.mu.Lock()
			live := make([]memberRow, 0, len(b.members.live))
			for _, row := range b.members.live {
				live = append(live, row)
			}
			pending := len(b.members.gone) > 0
			b.members.mu.Unlock()
			ctx, cancel := context.WithTimeout(life, memberBound)
			_, _ = b.pool.Exec(ctx, lapsedSQL)
			_ = b.writeMembers(ctx, renewSQL, live, memberTTL.Milliseconds())
			cancel()
			if pending {
				select {
				case b.members.kick <- struct{}{}:
				default:
				}
			}
		}
	}
}

// writeMembers runs renewSQL (with ttl ms) or leaveSQL for rows.
func (b *Backend) writeMembers(ctx context.Context, sql string, rows []memberRow, ttl int64) error {
	if len(rows) == 0 {
		return nil
	}
	topics, groups, ms := make([]string, len(rows)), make([]string, len(rows)), make([]string, len(rows))
	for i, r := range rows {
		topics[i], groups[i], ms[i] = r.topic, r.group, r.member
	}
	args := []any{topics, groups, ms}
	if sql == renewSQL {
		args = append(args, ttl)
	}
	_, err := b.pool.Exec(ctx, sql, args...)
	return err
}

// groupMembersSQL counts the live subscriptions of each group of topic $1.
const groupMembersSQL = `SELECT g.name, (SELECT count(*) FROM bus_members m
    WHERE m.topic = '#' || g.id AND m.until > clock_timestamp())
FROM bus_groups g WHERE g.topic = $1`

// fillConsumers sets the Consumers of each of gs, groups of topic, to the
// count of its live subscriptions. A group created after gs was read is
// left as it is.
func (b *Backend) fillConsumers(ctx context.Context, topic string, gs []backend.GroupInfo) error {
	if len(gs) == 0 {
		return nil
	}
	rows, err := b.pool.Query(ctx, groupMembersSQL, topic)
	if err != nil {
		return fmt.Errorf("postgres: members of the groups of %q: %w", topic, classify(err))
	}
	counts := map[string]int64{}
	for rows.Next() {
		var name string
		var n int64
		if err := rows.Scan(&name, &n); err != nil {
			rows.Close()
			return fmt.Errorf("postgres: members of the groups of %q: %w", topic, err)
		}
		counts[name] = n
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("postgres: members of the groups of %q: %w", topic, err)
	}
	for i := range gs {
		if n, ok := counts[gs[i].Name]; ok {
			gs[i].Consumers = backend.Figure(n)
		}
	}
	return nil
}
