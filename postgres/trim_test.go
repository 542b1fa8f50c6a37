package postgres_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/observer"
	"github.com/eventbus-go/bus/postgres"
)

// testTrimKeepsHeld publishes 40 messages to a topic with two groups and
// a trim every 20ms. Group g settles all but three (two leased, one
// nacked for an hour), group h all but one. The trim deletes the 36
// messages both groups settled and keeps the four some group holds;
// once g acks its two leased ones, the trim deletes them and keeps the
// other two.
func testTrimKeepsHeld(t *testing.T, rawURL string) {
	defer watchdog(t, time.Minute)()
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	be := openBackend(t, ctx, rawURL+"&trim_interval=20ms")
	const topic = "trim.held"
	sub := func(group string) backend.Subscription {
		s, err := be.Subscribe(ctx, topic, backend.SubscribeConfig{Group: group, StartFrom: backend.StartOldest, AckTimeout: time.Minute, Observer: observer.Nop()})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	g, h := sub("g"), sub("h")
	for b := range 4 {
		msgs := make([]*backend.Message, 10)
		for i := range msgs {
			msgs[i] = &backend.Message{ID: fmt.Sprintf("m-%02d", 10*b+i), Payload: []byte("x")}
		}
		require.NoError(t, be.Publish(ctx, topic, msgs))
	}
	receiveAll := func(s backend.Subscription) map[string]backend.AckID {
		ids := map[string]backend.AckID{}
		for len(ids) < 40 {
			msgs, err := s.Receive(ctx, 64)
			require.NoError(t, err)
			for _, m := range msgs {
				ids[m.ID] = m.AckID
			}
		}
		return ids
	}
	settle := func(s backend.Subscription, ids map[string]backend.AckID, keep ...string) {
		var acks []backend.AckID
		for id, a := range ids {
			if !slices.Contains(keep, id) {
				acks = append(acks, a)
			}
		}
		require.NoError(t, s.Ack(ctx, acks))
	}
	gIDs, hIDs := receiveAll(g), receiveAll(h)
	require.NoError(t, g.Nack(ctx, gIDs["m-17"], time.Hour))
	settle(g, gIDs, "m-05", "m-17", "m-39")
	settle(h, hIDs, "m-30")

	stored := func() []string {
		rows, err := be.Pool().Query(ctx, `SELECT id FROM bus_messages WHERE topic = $1 ORDER BY id`, topic)
		require.NoError(t, err)
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return ids
	}
	require.Eventually(t, func() bool { return len(stored()) <= 4 }, 10*time.Second, 5*time.Millisecond, "the trim deletes what both groups settled")
	require.Equal(t, []string{"m-05", "m-17", "m-30", "m-39"}, stored(), "the trim keeps what a group holds")

	settle(g, map[string]backend.AckID{"m-05": gIDs["m-05"], "m-39": gIDs["m-39"]})
	require.Eventually(t, func() bool { return len(stored()) <= 2 }, 10*time.Second, 5*time.Millisecond, "the trim deletes what g acked")
	require.Equal(t, []string{"m-17", "m-30"}, stored(), "the trim keeps the nacked message and h's leased one")
}

// testTrimDeletesByRow fills a topic with 20000 messages that its group
// passed and reads the plan of the trim's delete for a first trim of the
// topic, as PostgreSQL plans a statement's first executions (with the
// parameters' values): the delete reads the batch by the log's key and
// deletes its rows by tuple id, rather than scanning the table or a
// range of it whose size the planner cannot know.
func testTrimDeletesByRow(t *testing.T, rawURL string) {
	defer watchdog(t, time.Minute)()
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	be := openBackend(t, ctx, rawURL)
	const topic = "trim.byrow"
	pool := be.Pool()
	_, err := pool.Exec(ctx, `INSERT INTO bus_messages (topic, ord, id, key, payload, published_at, visible_at)
SELECT $1, (1000 + g / 16)::text::xid8, g::text, '', '\x00', now(), now() FROM generate_series(1, 20000) g`, topic)
	require.NoError(t, err)
	defer func() { require.NoError(t, be.DeleteTopic(context.Background(), topic)) }()
	_, err = pool.Exec(ctx, `INSERT INTO bus_groups (topic, name, cur_ord, cur_seq)
SELECT $1, 'g', max(ord), max(seq) FROM bus_messages WHERE topic = $1`, topic)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `ANALYZE bus_messages`)
	require.NoError(t, err)

	rows, err := pool.Query(ctx, "EXPLAIN "+postgres.TrimDeleteSQL, topic, "0", int64(0))
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	plan := strings.Join(lines, "\n")
	require.NotContains(t, plan, "Seq Scan on bus_messages", "the plan:\n%s", plan)
	require.Contains(t, plan, "Tid Scan on bus_messages", "the plan:\n%s", plan)
}

// testTrimVacuumsMessages settles 50 messages of a topic with a trim every
// 20ms: once the trim deleted them, the backend vacuums bus_messages
// itself (a manual vacuum, counted in vacuum_count), without waiting for
// autovacuum's next visit.
func testTrimVacuumsMessages(t *testing.T, rawURL string) {
	defer watchdog(t, time.Minute)()
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	be := openBackend(t, ctx, rawURL+"&trim_interval=20ms")
	const topic = "trim.vacuum"
	pool := be.Pool()
	vacuums := func() int64 {
		var n int64
		require.NoError(t, pool.QueryRow(ctx, `SELECT vacuum_count FROM pg_stat_user_tables WHERE relname = 'bus_messages'`).Scan(&n))
		return n
	}
	before := vacuums()
	s, err := be.Subscribe(ctx, topic, backend.SubscribeConfig{Group: "g", StartFrom: backend.StartOldest, AckTimeout: time.Minute, Observer: observer.Nop()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	msgs := make([]*backend.Message, 50)
	for i := range msgs {
		msgs[i] = &backend.Message{ID: fmt.Sprintf("m-%02d", i), Payload: []byte("x")}
	}
	require.NoError(t, be.Publish(ctx, topic, msgs))
	var acks []backend.AckID
	for len(acks) < len(msgs) {
		got, err := s.Receive(ctx, 64)
		require.NoError(t, err)
		for _, m := range got {
			acks = append(acks, m.AckID)
		}
	}
	require.NoError(t, s.Ack(ctx, acks))
	var stored int64
	require.Eventually(t, func() bool {
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM bus_messages WHERE topic = $1`, topic).Scan(&stored))
		return stored == 0
	}, 10*time.Second, 5*time.Millisecond, "the trim deletes the settled messages")
	require.Eventually(t, func() bool { return vacuums() > before }, 10*time.Second, 5*time.Millisecond, "the backend vacuums bus_messages after the trim")
}
