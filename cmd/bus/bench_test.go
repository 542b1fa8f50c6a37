package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/inmemory"
	"github.com/eventbus-go/bus/observer"
)

func testBenchConfig(scenario string) benchConfig {
	return benchConfig{
		URL: "mem://", N: 3000, Size: 64, Publishers: 3, Batch: 16,
		MaxInFlight: 32, AckMode: bus.AckOnSuccess, Scenario: scenario,
		Timeout: time.Minute,
	}
}

func TestBenchDeliversEveryMessageOnce(t *testing.T) {
	tests := []struct {
		name     string
		scenario string
		ackMode  bus.AckMode
		batch    int
	}{
		{name: "e2e on-success", scenario: scenarioE2E, ackMode: bus.AckOnSuccess, batch: 16},
		{name: "e2e on-receive", scenario: scenarioE2E, ackMode: bus.AckOnReceive, batch: 7},
		{name: "e2e manual", scenario: scenarioE2E, ackMode: bus.AckManual, batch: 1},
		{name: "consume on-success", scenario: scenarioConsume, ackMode: bus.AckOnSuccess, batch: 16},
		{name: "consume manual", scenario: scenarioConsume, ackMode: bus.AckManual, batch: 100},
		{name: "publish", scenario: scenarioPublish, ackMode: bus.AckOnSuccess, batch: 16},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testBenchConfig(tt.scenario)
			cfg.AckMode, cfg.Batch = tt.ackMode, tt.batch
			res, err := runBench(context.Background(), cfg, nil)
			require.NoError(t, err, "bench run")
			require.NoError(t, res.failure(), "run must not fail")
			assert.Equal(t, tt.scenario, res.Scenario)
			assert.EqualValues(t, cfg.N, res.Delivered, "every message delivered (published, for the publish scenario)")
			assert.Zero(t, res.Duplicates, "no duplicates")
			assert.Zero(t, res.Lost, "nothing lost")
			assert.Zero(t, res.Foreign, "no foreign messages on a fresh topic")
			assert.Zero(t, res.Errors, "no background errors: %s", res.FirstError)
			assert.Positive(t, res.Seconds, "run is timed")
			assert.Positive(t, res.MsgsPerSec, "throughput is reported")
			assert.Positive(t, res.PeakHeapMiB, "heap is sampled")
			if tt.scenario != scenarioConsume {
				assert.Positive(t, res.P50, "latency recorded")
				assert.GreaterOrEqual(t, res.P99, res.P50, "p99 >= p50")
				assert.GreaterOrEqual(t, res.Max, res.P99, "max >= p99")
			}
		})
	}
}

// benchJSONKeys are the keys of every bus bench --json line.
var benchJSONKeys = []string{
	"achieved_rate", "ack_mode", "backend", "batch", "cpu_us_per_msg", "delivered", "duplicates", "early", "gogc", "late", "latency", "lost",
	"max_in_flight", "msgs_per_sec", "n", "order_violations", "p50_ms", "p999_ms", "p99_ms", "peak_heap_mib", "publishers",
	"rate", "rate_short", "scenario", "seconds", "send_late_p50_ms", "send_late_p99_ms", "size",
}

// decodeBenchJSON checks that stdout is one JSON line and returns it as a
// map and as a jsonResult.
func decodeBenchJSON(t *testing.T, stdout string) (map[string]any, jsonResult) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	require.Len(t, lines, 1, "exactly one line on stdout: %q", stdout)
	var fields map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &fields), "stdout is JSON")
	var res jsonResult
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &res), "decodes into the result")
	return fields, res
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func TestBenchJSONPrintsOneLineWithExactlyTheDocumentedKeys(t *testing.T) {
	code, stdout, stderr := runCLI(t, "", "bench", "--url", "mem://", "-n", "2000", "--size", "256", "--scenario", "e2e",
		"--batch", "8", "--publishers", "2", "--max-in-flight", "64", "--ack-mode", "manual", "--json")
	require.Equal(t, exitOK, code, "bench succeeds; stderr: %s", stderr)
	fields, res := decodeBenchJSON(t, stdout)
	assert.Equal(t, benchJSONKeys, sortedKeys(fields), "exactly the documented keys")

	assert.Equal(t, "e2e", res.Scenario)
	assert.Equal(t, 2000, res.N)
	assert.Equal(t, 256, res.Size)
	assert.EqualValues(t, 2000, res.Delivered, "every message delivered")
	assert.Zero(t, res.Lost, "nothing lost")
	assert.Zero(t, res.Duplicates, "no duplicates")
	assert.Positive(t, res.MsgsPerSec, "throughput")
	require.NotNil(t, res.P50Ms, "e2e measures latency")
	require.NotNil(t, res.P99Ms, "e2e measures latency")
	require.NotNil(t, res.P999Ms, "e2e measures latency")
	assert.GreaterOrEqual(t, *res.P999Ms, *res.P99Ms, "p999 >= p99")
	assert.Equal(t, "manual", res.AckMode, "settings: ack mode")
	assert.Equal(t, 8, res.Batch, "settings: batch")
	assert.Equal(t, 2, res.Publishers, "settings: publishers")
	assert.Equal(t, 64, res.MaxInFlight, "settings: max in flight")
	assert.Zero(t, res.Rate, "settings: unpaced")
	assert.Nil(t, res.AchievedRate, "no achieved rate when unpaced")
	assert.Nil(t, res.SendLateP50Ms, "no send lateness when unpaced")
	assert.Nil(t, res.SendLateP99Ms, "no send lateness when unpaced")
	assert.Equal(t, gcPercent(), res.GOGC, "settings: the runtime's GOGC by default")
	assert.Positive(t, res.PeakHeapMiB, "peak heap")
	assert.Contains(t, stderr, "peak live heap", "heap figure also goes to stderr in JSON mode")
}

func TestBenchConsumeReportsNullLatencyInJSON(t *testing.T) {
	code, stdout, stderr := runCLI(t, "", "bench", "--url", "mem://", "-n", "2000", "--scenario", "consume", "--json")
	require.Equal(t, exitOK, code, "bench succeeds; stderr: %s", stderr)
	fields, res := decodeBenchJSON(t, stdout)
	assert.Equal(t, benchJSONKeys, sortedKeys(fields), "consume has the same keys")
	for _, k := range []string{"p50_ms", "p99_ms", "p999_ms", "latency"} {
		v, ok := fields[k]
		assert.True(t, ok, "%s present", k)
		assert.Nil(t, v, "%s is null, not 0, when no latency was measured", k)
	}
	assert.EqualValues(t, 2000, res.Delivered, "every message consumed")
}

func TestBenchGOGCFlagIsOptIn(t *testing.T) {
	before := gcPercent()
	code, stdout, stderr := runCLI(t, "", "bench", "--url", "mem://", "-n", "500", "--gogc", "250", "--json")
	require.Equal(t, exitOK, code, "bench succeeds; stderr: %s", stderr)
	_, res := decodeBenchJSON(t, stdout)
	assert.Equal(t, 250, res.GOGC, "--gogc sets the run's GOGC")
	assert.Equal(t, before, gcPercent(), "the process's GOGC is restored after the run")

	code, stdout, stderr = runCLI(t, "", "bench", "--url", "mem://", "-n", "500", "--json")
	require.Equal(t, exitOK, code, "bench succeeds; stderr: %s", stderr)
	_, res = decodeBenchJSON(t, stdout)
	assert.Equal(t, before, res.GOGC, "without --gogc the runtime's setting stays")
}

func TestBenchTablePrintsTheSummary(t *testing.T) {
	code, stdout, stderr := runCLI(t, "", "bench", "-n", "1000", "--url", "mem://")
	require.Equal(t, exitOK, code, "bench succeeds; stderr: %s", stderr)
	for _, row := range []string{"backend", "msgs/s", "p50", "p99", "max", "delivered", "duplicates", "lost", "peak live heap"} {
		assert.Contains(t, stdout, row, "summary has %q", row)
	}
	assert.NotContains(t, stderr, "\r", "no progress line when stderr is not a terminal")
}

func TestBenchIgnoresMessagesFromOtherRuns(t *testing.T) {
	url := fmt.Sprintf("mem://bench-foreign-%d", time.Now().UnixNano())
	// Keep the named broker open while both runs use it.
	keep, err := bus.Open(context.Background(), url)
	require.NoError(t, err, "open named broker")
	defer func() { require.NoError(t, keep.Close(context.Background()), "close") }()

	stale := make([]*bus.Message, 0, 50)
	for i := range 50 {
		p := make([]byte, 32)
		p[0] = byte(i)
		stale = append(stale, &bus.Message{Payload: p})
	}
	stale = append(stale, &bus.Message{Payload: []byte("short")})
	require.NoError(t, keep.Publish(context.Background(), "bench.shared", stale...), "publish stale messages")

	cfg := testBenchConfig(scenarioConsume)
	cfg.URL, cfg.Topic = url, "bench.shared"
	res, err := runBench(context.Background(), cfg, nil)
	require.NoError(t, err, "bench run")
	require.NoError(t, res.failure(), "stale messages do not make the run fail")
	assert.EqualValues(t, cfg.N, res.Delivered, "only this run's messages count as delivered")
	assert.EqualValues(t, 51, res.Foreign, "stale messages are counted as foreign")
}

func TestBenchConsumeFailsClearlyWhenTheBacklogCannotHoldThePrefill(t *testing.T) {
	saved := prefillStall
	prefillStall = 200 * time.Millisecond
	defer func() { prefillStall = saved }()

	cfg := testBenchConfig(scenarioConsume)
	cfg.URL = "mem://?max_backlog=100"
	cfg.N = 1000
	start := time.Now()
	_, err := runBench(context.Background(), cfg, nil)
	took := time.Since(start)
	require.Error(t, err, "a prefill that cannot fit must fail, not hang")
	assert.Contains(t, err.Error(), "prefill stalled", "the error says what happened")
	assert.Contains(t, err.Error(), "max_backlog=1000", "the error says how to fix it")

	m := regexp.MustCompile(`no publish completed for (\S+);`).FindStringSubmatch(err.Error())
	require.Len(t, m, 2, "the error states how long the prefill stalled: %v", err)
	stalled, perr := time.ParseDuration(m[1])
	require.NoError(t, perr, "the stated time is a duration")
	assert.GreaterOrEqual(t, stalled, prefillStall, "the stall lasted at least the limit")
	assert.LessOrEqual(t, stalled, took, "the stated time is no more than the run took")
}

func TestBenchConsumeWithDefaultsOnMemSucceeds(t *testing.T) {
	// The default -n exceeds mem://'s default backlog; the bench raises
	// the backlog of its private broker to fit.
	code, stdout, stderr := runCLI(t, "", "bench", "--url", "mem://", "--scenario", "consume", "--json")
	require.Equal(t, exitOK, code, "consume with its defaults succeeds; stderr: %s", stderr)
	_, res := decodeBenchJSON(t, stdout)
	assert.Equal(t, defaultBenchN, res.N, "the default -n")
	assert.Greater(t, defaultBenchN, inmemory.DefaultMaxBacklog, "the default -n is above mem's default backlog")
	assert.EqualValues(t, defaultBenchN, res.Delivered, "every message consumed")
	assert.Zero(t, res.Lost, "nothing lost")
}

func TestBenchURLRaisesOnlyAnImplicitPrivateMemBacklog(t *testing.T) {
	cfg := testBenchConfig(scenarioConsume)
	cfg.N = 500_000
	tests := []struct {
		name, url, scenario, want string
	}{
		{name: "private mem", url: "mem://", scenario: scenarioConsume, want: "mem://?max_backlog=500000&max_backlog_bytes=" + fmt.Sprint(memBacklogBytes(cfg))},
		{name: "explicit backlog kept", url: "mem://?max_backlog=10", scenario: scenarioConsume, want: "mem://?max_backlog=10"},
		{name: "explicit bytes kept", url: "mem://?max_backlog_bytes=10", scenario: scenarioConsume, want: "mem://?max_backlog_bytes=10"},
		{name: "named broker keeps its options", url: "mem://shared", scenario: scenarioConsume, want: "mem://shared"},
		{name: "e2e keeps backpressure", url: "mem://", scenario: scenarioE2E, want: "mem://"},
		{name: "other backends", url: "redis://127.0.0.1:6379", scenario: scenarioConsume, want: "redis://127.0.0.1:6379"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := cfg
			c.URL, c.Scenario = tt.url, tt.scenario
			assert.Equal(t, tt.want, benchURL(c))
		})
	}
}

func TestBenchRatePacesThePublishers(t *testing.T) {
	const rate, n = 2000.0, 400 // at least 0.15 s of schedule
	tests := []struct {
		name       string
		scenario   string
		publishers int
		batch      int
	}{
		{name: "e2e, one publisher, batches", scenario: scenarioE2E, publishers: 1, batch: 16},
		{name: "e2e, spread over publishers", scenario: scenarioE2E, publishers: 4, batch: 1},
		{name: "publish", scenario: scenarioPublish, publishers: 2, batch: 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testBenchConfig(tt.scenario)
			cfg.N, cfg.Rate, cfg.Publishers, cfg.Batch = n, rate, tt.publishers, tt.batch
			res, err := runBench(context.Background(), cfg, nil)
			require.NoError(t, err, "bench run")
			require.NoError(t, res.failure(), "run must not fail")
			assert.GreaterOrEqual(t, res.Seconds, 0.15, "%d messages at %v/s cannot take less than the schedule", n, rate)
			assert.LessOrEqual(t, res.AchievedRate, rate*1.05, "the publishers never run ahead of the schedule")
			assert.GreaterOrEqual(t, res.AchievedRate, rate/4, "the publishers roughly keep the schedule")
			assert.Contains(t, res.Latency, "scheduled send", "latency counts from the scheduled time")
			assert.Positive(t, res.P999, "p999 measured")
			assert.GreaterOrEqual(t, res.P999, res.P99, "p999 >= p99")
			// Every message's latency runs from its batch's due time, so
			// it includes how late the batch was sent.
			require.True(t, res.Paced, "send lateness measured when paced")
			assert.GreaterOrEqual(t, res.SendLateP99, res.SendLateP50, "send late p99 >= p50")
			assert.GreaterOrEqual(t, res.P50, res.SendLateP50, "latency p50 includes the send lateness")
			assert.GreaterOrEqual(t, res.P99, res.SendLateP99, "latency p99 includes the send lateness")
		})
	}
}

func TestBenchRateShortfallIsReported(t *testing.T) {
	// Nothing keeps a schedule of a billion messages a second.
	code, stdout, stderr := runCLI(t, "", "bench", "--url", "mem://", "-n", "2000", "--rate", "1e9", "--batch", "1", "--json")
	require.Equal(t, exitOK, code, "a short rate is reported, not a failure; stderr: %s", stderr)
	_, res := decodeBenchJSON(t, stdout)
	require.NotNil(t, res.AchievedRate, "achieved rate reported when paced")
	require.NotNil(t, res.SendLateP50Ms, "send lateness reported when paced")
	require.NotNil(t, res.SendLateP99Ms, "send lateness reported when paced")
	assert.Positive(t, *res.SendLateP99Ms, "publishers behind a schedule of 1e9 msgs/s send late")
	assert.True(t, res.RateShort, "a rate of 1e9 msgs/s is out of reach")
	assert.Contains(t, stderr, "SHORT of the target", "the shortfall is said on stderr")
}

func TestBenchTimeoutFailsWithExitOne(t *testing.T) {
	code, stdout, stderr := runCLI(t, "", "bench", "-n", "200000", "--timeout", "1ns", "--json")
	assert.Equal(t, exitFailure, code, "a timed-out run fails")
	assert.Contains(t, stderr, "timed out", "the reason is printed")
	var res jsonResult
	require.NoError(t, json.Unmarshal([]byte(stdout), &res), "the JSON line is still printed")
	assert.Positive(t, res.Lost, "undelivered messages count as lost")
}

// Messages the broker still holds for the run's group when the run
// times out are late, not lost.
func TestBenchTellsLateFromLost(t *testing.T) {
	// One key at 20 ms a message: a few hundred are handled by the
	// deadline and in the close's drain, the rest wait at the broker.
	code, stdout, stderr := runCLI(t, "", "bench", "--url", "mem://", "--scenario", "keyed", "-n", "2000", "--keys", "1",
		"--members", "1", "--max-in-flight", "1", "--handler-delay", "20ms", "--timeout", "1s", "--json")
	assert.Equal(t, exitFailure, code, "a timed-out run fails")
	assert.Contains(t, stderr, "late (still held by the broker)", "the reason tells late from lost")
	var res jsonResult
	require.NoError(t, json.Unmarshal([]byte(stdout), &res), "the JSON line is printed")
	assert.Zero(t, res.Lost, "every message is held by the broker or delivered: none lost")
	assert.Positive(t, res.Late, "the handler's pace leaves messages waiting at the deadline")
	assert.EqualValues(t, 2000, res.Delivered-res.Duplicates+res.Late, "delivered and late make up the run")
}

func TestBenchRejectsInvalidFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{name: "payload too small for the stamp", args: []string{"--size", "8"}, want: "--size 8"},
		{name: "unknown scenario", args: []string{"--scenario", "soak"}, want: `--scenario "soak"`},
		{name: "unknown ack mode", args: []string{"--ack-mode", "later"}, want: "--ack-mode"},
		{name: "zero messages", args: []string{"-n", "0"}, want: "-n 0"},
		{name: "zero publishers", args: []string{"--publishers", "0"}, want: "--publishers 0"},
		{name: "invalid topic", args: []string{"--topic", "a b"}, want: "--topic"},
		{name: "negative rate", args: []string{"--rate", "-1"}, want: "--rate -1"},
		{name: "rate not a number", args: []string{"--rate", "NaN"}, want: "--rate NaN"},
		{name: "paced consume", args: []string{"--rate", "100", "--scenario", "consume"}, want: "not paced"},
		{name: "zero rounds", args: []string{"--baseline", "--rounds", "-1"}, want: "--rounds -1"},
		{name: "rounds without baseline", args: []string{"--rounds", "3"}, want: "needs --baseline"},
		{name: "baseline without a raw client", args: []string{"--baseline", "--url", "carrier-pigeon://loft"}, want: "no raw client"},
		{name: "gogc below -1", args: []string{"--gogc", "-5"}, want: "--gogc -5"},
		{name: "negative async window", args: []string{"--scenario", "publish", "--async-window", "-1"}, want: "--async-window -1"},
		{name: "async window outside publish", args: []string{"--async-window", "100"}, want: "--async-window 100"},
		{name: "stray argument", args: []string{"extra"}, want: "unexpected arguments"},
		{name: "unknown flag", args: []string{"--bogus"}, want: "bogus"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A closed port: a flag error must come before any I/O.
			args := append([]string{"bench", "--url", "redis://127.0.0.1:1"}, tt.args...)
			code, _, stderr := runCLI(t, "", args...)
			assert.Equal(t, exitUsage, code, "invalid flags are a usage error")
			assert.Contains(t, stderr, tt.want, "the error names the flag")
		})
	}
}

func TestBenchAsyncWindowPublishesEveryMessage(t *testing.T) {
	code, stdout, stderr := runCLI(t, "", "bench", "--url", "mem://", "--scenario", "publish", "--async-window", "64",
		"-n", "3000", "--batch", "1", "--baseline", "--json")
	require.Equal(t, exitOK, code, "stderr: %s", stderr)
	var res struct {
		Delivered int64 `json:"delivered"`
		Lost      int64 `json:"lost"`
		Baseline  struct {
			Delivered int64 `json:"delivered"`
		} `json:"baseline"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &res), "one JSON line: %s", stdout)
	assert.Equal(t, int64(3000), res.Delivered, "every PublishAsync result is nil")
	assert.Zero(t, res.Lost)
	assert.Equal(t, int64(3000), res.Baseline.Delivered, "the raw side ran too")
}

func TestBenchUnknownSchemeFails(t *testing.T) {
	code, _, stderr := runCLI(t, "", "bench", "--url", "carrier-pigeon://loft", "-n", "10")
	assert.Equal(t, exitFailure, code, "an unknown backend fails")
	assert.Contains(t, stderr, "mem", "the error lists the known schemes")
}

func TestBenchURLDefaultsToEnvironment(t *testing.T) {
	t.Setenv("BUS_URL", "mem://from-env")
	assert.Equal(t, "mem://from-env", defaultURL(), "$BUS_URL is the default")
	t.Setenv("BUS_URL", "")
	assert.Equal(t, "mem://", defaultURL(), "mem:// without $BUS_URL")
}

// The keyed scenario runs several members of a key-ordered group and
// checks every key's order itself.
func TestBenchKeyedChecksKeyOrderAcrossMembers(t *testing.T) {
	code, stdout, stderr := runCLI(t, "", "bench", "--scenario", "keyed", "--keys", "8", "--members", "3",
		"--max-in-flight", "4", "-n", "2000", "--json")
	require.Equal(t, exitOK, code, "stderr: %s", stderr)
	fields, res := decodeBenchJSON(t, stdout)
	assert.EqualValues(t, 0, fields["order_violations"], "no key out of order")
	assert.EqualValues(t, 2000, res.Delivered, "every message delivered")
	assert.EqualValues(t, 0, res.Lost)

	code, _, stderr = runCLI(t, "", "bench", "--scenario", "keyed", "--keys", "8", "--publishers", "2")
	assert.Equal(t, exitUsage, code, "two publishers define no key order")
	assert.Contains(t, stderr, "--publishers")
}

// The order check counts a key's message handled after a later one of the
// same key, not a redelivery of the last one, nor other keys.
func TestOrderCheckCountsOnlyRegressionsWithinAKey(t *testing.T) {
	o := newOrderCheck(4)
	for _, seq := range []uint64{1, 5, 5, 2, 9, 6} {
		o.handled(seq)
	}
	assert.EqualValues(t, 0, o.count(), "keys 1, 1, 1 (again), 2, 1, 2: in order")
	o.handled(1)
	assert.EqualValues(t, 1, o.count(), "key 1 went back from 9 to 1")
}

// A notice without an error (a receive that recovered after an outage)
// is not a background error of the run, and does not crash it.
func TestBenchObserverCountsErrorsNotNotices(t *testing.T) {
	r := newBenchRun(benchConfig{}, "")
	r.observe(context.Background(), observer.Event{Scope: observer.ScopeReceive})
	require.Zero(t, r.errs.Load(), "a recovery notice is no error")
	r.observe(context.Background(), observer.Event{Scope: observer.ScopeReceive, Err: errors.New("boom")})
	require.EqualValues(t, 1, r.errs.Load(), "an error is counted")
}
