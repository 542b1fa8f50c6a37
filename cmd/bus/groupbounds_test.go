package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/testkit/autoscaletest"
)

func TestGroupsWithEventsShowsEachAutoscaledMembersBound(t *testing.T) {
	const url = "mem://groups-bounds-test"
	rec := &autoscaletest.Recorder{}
	b, err := bus.Open(context.Background(), url, bus.WithObserver(rec), bus.WithEvents("events"))
	require.NoError(t, err)
	defer func() { require.NoError(t, b.Close(context.Background())) }()
	autoscaletest.Run(t, b, rec, "orders")

	var rows []groupRow
	require.Eventually(t, func() bool {
		code, stdout, stderr := runCLI(t, "", "groups", "--url", url, "--topic", "orders", "--events", "events", "--json")
		require.Equal(t, exitOK, code, "stderr: %s", stderr)
		require.NoError(t, json.Unmarshal([]byte(stdout), &rows), "JSON: %s", stdout)
		return len(rows) == 1 && len(rows[0].Bounds) == 1 && rows[0].Bounds[0].Bound == 1
	}, 10*time.Second, 20*time.Millisecond, "the group's member is shown back at its minimum bound: %+v", rows)
	assert.Equal(t, "scaled", rows[0].Name)
	assert.NotEmpty(t, rows[0].Bounds[0].Member, "the member is named")
	assert.Equal(t, "drained", rows[0].Bounds[0].Reason)

	code, stdout, stderr := runCLI(t, "", "groups", "--url", url, "--topic", "orders", "--events", "events")
	require.Equal(t, exitOK, code, "stderr: %s", stderr)
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	require.Len(t, lines, 2, "a header and the group: %s", stdout)
	assert.Contains(t, lines[0], "BOUND", "the table has a bound column")
	assert.Contains(t, lines[1], rows[0].Bounds[0].Member+": 1 (drained ", "the member's bound, reason and time")

	code, stdout, _ = runCLI(t, "", "groups", "--url", url, "--topic", "orders")
	require.Equal(t, exitOK, code)
	assert.NotContains(t, stdout, "BOUND", "without --events no bounds are read")
}

func TestGroupsRejectsABadEventsTopic(t *testing.T) {
	code, _, stderr := runCLI(t, "", "groups", "--url", "redis://127.0.0.1:1", "--topic", "t", "--events", "a b")
	assert.Equal(t, exitUsage, code, "a usage error before any I/O")
	assert.Contains(t, stderr, "--events")
}
