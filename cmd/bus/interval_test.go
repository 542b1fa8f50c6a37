package main

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/internal/testkit/pgtest"
)

var intervalLine = regexp.MustCompile(`(?m)^interval bus +[0-9.]+s  delivered ([0-9]+)  [0-9]+ msgs/s  p50 \S+ ms  p99 \S+ ms  max \S+ ms$`)

func TestBenchReportEveryPrintsEachIntervalsDeliveriesAndLatency(t *testing.T) {
	var out bytes.Buffer
	cfg := testBenchConfig(scenarioE2E)
	cfg.N, cfg.Rate = 600, 3000 // at least 0.2 s of schedule
	cfg.ReportEvery, cfg.ReportTo = 20*time.Millisecond, &out
	res, err := runBench(context.Background(), cfg, nil)
	require.NoError(t, err, "bench run")
	require.NoError(t, res.failure(), "run must not fail")
	lines := intervalLine.FindAllStringSubmatch(out.String(), -1)
	require.GreaterOrEqual(t, len(lines), 2, "a line per interval of a run longer than two: %s", out.String())
	total := 0
	for _, l := range lines {
		n, err := strconv.Atoi(l[1])
		require.NoError(t, err)
		total += n
	}
	assert.Equal(t, cfg.N, total, "the intervals together count every delivery once: %s", out.String())
}

func TestBenchReportEveryWantsTheE2EScenario(t *testing.T) {
	cfg := testBenchConfig(scenarioPublish)
	cfg.ReportEvery = time.Second
	assert.ErrorContains(t, cfg.validate(), "--report-every")
	cfg = testBenchConfig(scenarioE2E)
	cfg.ReportEvery = -time.Second
	assert.ErrorContains(t, cfg.validate(), "--report-every")
}

func TestBenchReportEveryPrintsThePostgresTableSizes(t *testing.T) {
	db := pgtest.Start(t).URL()
	code, _, stderr := runCLI(t, "", "bench", "--url", db, "-n", "200", "--report-every", "50ms")
	require.Equal(t, exitOK, code, "bench succeeds: %s", stderr)
	assert.Regexp(t, intervalLine, stderr, "an interval line")
	assert.Regexp(t, `(?m)^table bus_messages +[0-9.]+ MiB  live [0-9]+  dead [0-9]+  vacuums [0-9]+$`, stderr, "the message table's size and dead rows")
	assert.Regexp(t, `(?m)^table bus_deliveries `, stderr, "the deliveries table")
}
