package postgres_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/observer"
	"github.com/eventbus-go/bus/postgres"
)

// testReceiveDecodesBothFormats receives the same messages over a pool
// in pgx's default mode, whose fetches return binary columns, and over
// one in the simple protocol, whose fetches return text: both deliver
// the same fields, and both dead-letter a message whose stored headers
// do not decode.
func testReceiveDecodesBothFormats(t *testing.T, rawURL string) {
	ctx := testCtx(t)

	open := func(mode pgx.QueryExecMode) (*pgxpool.Pool, backend.Backend) {
		cfg, err := pgxpool.ParseConfig(rawURL)
		require.NoError(t, err)
		cfg.ConnConfig.DefaultQueryExecMode = mode
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		be, err := postgres.New(ctx, pool, nil)
		require.NoError(t, err)
		t.Cleanup(func() { _ = be.Close() })
		return pool, be
	}
	pool, pub := open(pgx.QueryExecModeCacheStatement)

	at := time.Date(2026, 3, 4, 5, 6, 7, 891_234_000, time.UTC)
	before2000 := time.Date(1999, 12, 31, 23, 59, 58, 500_001_000, time.UTC)
	published := func(topic string) []*backend.Message {
		return []*backend.Message{
			{ID: topic + "-a", Key: "k-a", Headers: map[string]string{"h": "v", "e": ""}, Payload: []byte("p-a"), PublishedAt: at},
			{ID: topic + "-b", Payload: []byte{}, PublishedAt: before2000},
			{ID: topic + "-c", Key: "k-c", Headers: map[string]string{"h": "c"}, Payload: []byte("p-c"), PublishedAt: at},
		}
	}
	type got struct {
		ID, Key     string
		Headers     map[string]string
		Payload     string
		PublishedAt time.Time
		Attempt     int
	}
	receive := func(sub backend.Subscription, n int) []got {
		var out []got
		for len(out) < n {
			msgs, err := sub.Receive(ctx, 16)
			require.NoError(t, err)
			for _, m := range msgs {
				out = append(out, got{m.ID, m.Key, m.Headers, string(m.Payload), m.PublishedAt.UTC(), m.Attempt})
				require.NoError(t, sub.Ack(ctx, []backend.AckID{m.AckID}))
			}
		}
		return out
	}

	for _, mode := range []struct {
		name string
		mode pgx.QueryExecMode
	}{
		{"extended", pgx.QueryExecModeCacheStatement},
		{"simple", pgx.QueryExecModeSimpleProtocol},
	} {
		t.Run(mode.name, func(t *testing.T) {
			_, be := open(mode.mode)
			topic := "formats-" + mode.name
			cfg := backend.SubscribeConfig{Group: "g", StartFrom: backend.StartOldest, AckTimeout: time.Minute, MaxInFlight: 16, Observer: observer.Nop()}
			subscribe := func(topic, group, deadLetters string) backend.Subscription {
				cfg := cfg
				cfg.Group, cfg.DeadLetterTopic = group, deadLetters
				sub, err := be.Subscribe(ctx, topic, cfg)
				require.NoError(t, err)
				t.Cleanup(func() { _ = sub.Close() })
				return sub
			}
			sub := subscribe(topic, "g", topic+"-dlq")
			plain := subscribe(topic, "plain", "") // acks what does not decode
			dlq := subscribe(topic+"-dlq", "g", "")

			require.NoError(t, pub.Publish(ctx, topic, published(topic)))
			tag, err := pool.Exec(ctx, `UPDATE bus_messages SET headers = '\xff'::bytea WHERE topic = $1 AND id = $2`, topic, topic+"-c")
			require.NoError(t, err)
			require.EqualValues(t, 1, tag.RowsAffected())

			want := []got{
				{topic + "-a", "k-a", map[string]string{"h": "v", "e": ""}, "p-a", at, 1},
				{topic + "-b", "", nil, "", before2000, 1},
			}
			assert.Equal(t, want, receive(sub, 2))
			assert.Equal(t, want, receive(plain, 2))
			groups, err := be.(backend.Inspector).Groups(ctx, topic)
			require.NoError(t, err)
			require.Len(t, groups, 2)
			for _, g := range groups {
				assert.Zero(t, g.Pending, "group %s settled every delivery", g.Name)
				assert.Zero(t, g.Lag, "group %s read every message", g.Name)
			}
			dead := receive(dlq, 1)
			require.Len(t, dead, 1)
			assert.Equal(t, topic+"-c", dead[0].ID)
			assert.Equal(t, "k-c", dead[0].Key)
			assert.Equal(t, "p-c", dead[0].Payload)
			assert.Equal(t, string(backend.CodeMalformed), dead[0].Headers[backend.HeaderDeadLetterCode])
		})
	}
}
