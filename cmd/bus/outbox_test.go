package main

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/testkit/pgtest"
	"github.com/eventbus-go/bus/internal/testkit/redistest"
	"github.com/eventbus-go/bus/outbox"
)

// outboxStats reads the outbox's counts.
func outboxStats(t *testing.T, db string) outbox.Stats {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rep, err := readOutbox(ctx, db, 10)
	require.NoError(t, err)
	return rep.Stats
}

func TestOutboxCommandsMigrateRelayAndShowDeadRows(t *testing.T) {
	timer := time.AfterFunc(2*time.Minute, func() { panic("watchdog: the outbox commands did not finish within 2m") })
	defer timer.Stop()
	db := pgtest.Start(t).URL()
	code, _, stderr := runCLI(t, "", "outbox")
	assert.Equal(t, exitUsage, code, "bus outbox needs a subcommand: %s", stderr)
	for range 2 {
		code, stdout, stderr := runCLI(t, "", "outbox", "migrate", "--db", db)
		require.Equal(t, exitOK, code, "migrate succeeds, twice: %s", stderr)
		assert.Contains(t, stdout, "in place")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, db)
	require.NoError(t, err)
	defer conn.Close(ctx)
	require.NoError(t, outbox.Publish(ctx, conn, "orders", &bus.Message{Payload: []byte("ok")}))
	_, err = conn.Exec(ctx, `INSERT INTO bus_outbox (part, topic, id, key, payload) VALUES (3, 'no good', 'bad-1', '', '')`)
	require.NoError(t, err)

	relayCtx, stopRelay := context.WithCancel(ctx)
	done := make(chan int, 1)
	go func() {
		done <- run(relayCtx, []string{"outbox", "relay", "--db", db, "--url", "mem://", "--poll", "20ms"}, nil, &syncBuffer{}, &syncBuffer{})
	}()
	require.Eventually(t, func() bool { st := outboxStats(t, db); return st.Pending == 0 && st.Dead == 1 }, 20*time.Second, 10*time.Millisecond,
		"the relay publishes the good row and moves the bad one to the dead table")
	stopRelay()
	assert.Equal(t, exitOK, <-done, "the relay stops cleanly when interrupted")

	code, stdout, stderr := runCLI(t, "", "topics", "--url", "mem://", "--db", db)
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, stdout, "OUTBOX: 0 pending")
	assert.Contains(t, stdout, "no good", "the dead row is listed with its topic")
	code, stdout, stderr = runCLI(t, "", "topics", "--url", "mem://", "--db", db, "--json")
	require.Equal(t, exitOK, code, stderr)
	var got struct {
		Outbox outboxReport `json:"outbox"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &got))
	require.Len(t, got.Outbox.Dead, 1)
	assert.Equal(t, "bad-1", got.Outbox.Dead[0].ID)
	assert.Contains(t, got.Outbox.Dead[0].Reason, "invalid topic")

	rec := httptest.NewRecorder()
	(&uiServer{outboxDB: db}).outbox(rec, httptest.NewRequest("GET", "/api/outbox", nil))
	var panel struct {
		Enabled bool         `json:"enabled"`
		Report  outboxReport `json:"report"`
	}
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &panel))
	assert.True(t, panel.Enabled)
	assert.EqualValues(t, 1, panel.Report.Stats.Dead, "the dashboard panel shows the dead row")
	rec = httptest.NewRecorder()
	(&uiServer{}).outbox(rec, httptest.NewRequest("GET", "/api/outbox", nil))
	assert.JSONEq(t, `{"enabled": false}`, rec.Body.String(), "without --db the panel stays hidden")

	code, stdout, stderr = runCLI(t, "", "bench", "--scenario", "outbox", "--db", db, "--url", redistest.Start(t).URL(), "-n", "2000", "--baseline")
	require.Equal(t, exitOK, code, "the outbox bench delivers every message once: %s", stderr)
	assert.Contains(t, stdout, "pgx+go-redis", "the raw loop runs in the same run")

	for _, args := range [][]string{{}, {"--seq", "x"}, {"--seq", "1", "--all"}} {
		code, _, stderr = runCLI(t, "", append([]string{"outbox", "requeue", "--db", db}, args...)...)
		assert.Equal(t, exitUsage, code, "requeue %v: refused before any I/O: %s", args, stderr)
	}
	code, stdout, stderr = runCLI(t, "", "outbox", "requeue", "--db", db, "--all")
	require.Equal(t, exitOK, code, stderr)
	assert.Contains(t, stdout, "1 dead row(s) requeued")
	st := outboxStats(t, db)
	assert.Equal(t, [2]int64{1, 0}, [2]int64{st.Pending, st.Dead}, "the dead row waits in the outbox again")
}

func TestBenchOutboxFlagsAreCheckedBeforeIO(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{name: "no database", args: []string{"--scenario", "outbox"}, want: "--db"},
		{name: "database without outbox", args: []string{"--db", "postgres://127.0.0.1:1/x"}, want: "only the outbox scenario"},
		{name: "baseline beyond redis", args: []string{"--scenario", "outbox", "--db", "postgres://127.0.0.1:1/x", "--baseline"}, want: "redis://"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, "", append([]string{"bench", "--url", "mem://"}, tt.args...)...)
			assert.Equal(t, exitUsage, code)
			assert.Contains(t, stderr, tt.want)
		})
	}
}
