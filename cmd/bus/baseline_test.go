package main

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/internal/testkit/natstest"
	"github.com/eventbus-go/bus/internal/testkit/redistest"
)

func TestBenchBaselineOnMemPrintsBothSidesAndTheRatio(t *testing.T) {
	code, stdout, stderr := runCLI(t, "", "bench", "--url", "mem://", "-n", "3000", "--baseline", "--rounds", "2")
	require.Equal(t, exitOK, code, "baseline succeeds; stderr: %s", stderr)
	for _, s := range []string{"bus/raw", "Go channel", "rounds", "msgs/s", "p50", "p99", "p999"} {
		assert.Contains(t, stdout, s, "the comparison shows %q", s)
	}
	line := stdout[strings.Index(stdout, "msgs/s"):]
	line = line[:strings.IndexByte(line, '\n')]
	fields := strings.Fields(line)
	require.Len(t, fields, 4, "msgs/s row has bus, raw and ratio: %q", line)
	assert.NotEqual(t, "-", fields[3], "a throughput ratio is printed")
}

func TestBenchBaselineJSONHasTheRawFiguresAndRatios(t *testing.T) {
	code, stdout, stderr := runCLI(t, "", "bench", "--url", "mem://", "-n", "3000", "--baseline", "--json")
	require.Equal(t, exitOK, code, "baseline succeeds; stderr: %s", stderr)
	fields, res := decodeBenchJSON(t, stdout)
	want := slices.Sorted(slices.Values(append(slices.Clone(benchJSONKeys), "baseline", "ratio", "rounds")))
	assert.Equal(t, want, sortedKeys(fields), "the documented keys plus baseline, ratio and rounds")
	require.NotNil(t, res.Baseline, "baseline object")
	require.NotNil(t, res.Ratio, "ratio object")
	assert.Equal(t, 1, res.Rounds, "one round by default")
	assert.Equal(t, "Go channel", res.Baseline.Client, "mem's raw client is a channel")
	assert.EqualValues(t, 3000, res.Baseline.Delivered, "the raw side delivered every message")
	assert.Zero(t, res.Baseline.Lost, "the raw side lost nothing")
	assert.Positive(t, res.Baseline.MsgsPerSec, "raw throughput")
	require.NotNil(t, res.Baseline.P99Ms, "raw latency measured in e2e")
	assert.InDelta(t, res.MsgsPerSec/res.Baseline.MsgsPerSec, res.Ratio.MsgsPerSec, 1e-9, "throughput ratio is bus/raw")
	require.NotNil(t, res.Ratio.P50, "p50 ratio when both sides measured latency")
	require.NotNil(t, res.Ratio.P99, "p99 ratio when both sides measured latency")
	if res.CPUUsPerMsg != nil && res.Baseline.CPUUsPerMsg != nil {
		require.NotNil(t, res.Ratio.CPU, "cpu ratio when both sides measured CPU")
		assert.InDelta(t, *res.CPUUsPerMsg / *res.Baseline.CPUUsPerMsg, *res.Ratio.CPU, 1e-9, "cpu ratio is bus/raw")
	}
}

func TestBenchBaselineConsumeHasNullLatencyRatios(t *testing.T) {
	code, stdout, stderr := runCLI(t, "", "bench", "--url", "mem://", "-n", "2000", "--scenario", "consume", "--baseline", "--json")
	require.Equal(t, exitOK, code, "baseline succeeds; stderr: %s", stderr)
	fields, res := decodeBenchJSON(t, stdout)
	require.NotNil(t, res.Baseline, "baseline object")
	assert.EqualValues(t, 2000, res.Baseline.Delivered, "the channel held and delivered the whole prefill")
	assert.Nil(t, res.Baseline.P50Ms, "no raw latency in consume")
	assert.Positive(t, res.Ratio.MsgsPerSec, "throughput ratio")
	ratio, ok := fields["ratio"].(map[string]any)
	require.True(t, ok, "ratio is an object")
	for _, k := range []string{"p50", "p99", "p999"} {
		v, present := ratio[k]
		assert.True(t, present, "ratio.%s present", k)
		assert.Nil(t, v, "ratio.%s is null when no latency was measured", k)
	}
}

// baselineRun runs a small baseline comparison and checks that both sides
// delivered every message exactly once.
func baselineRun(t *testing.T, cfg benchConfig) comparison {
	t.Helper()
	cfg.Baseline = true
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := runComparison(ctx, cfg, nil)
	require.NoError(t, err, "baseline run")
	require.Equal(t, cfg.rounds(), c.Rounds, "every round ran")
	for _, r := range []benchResult{c.Bus, c.Raw} {
		require.NoError(t, r.failure(), "%s must not fail", r.Client)
		assert.EqualValues(t, cfg.N, r.Delivered, "%s: every message delivered", r.Client)
		assert.Zero(t, r.Duplicates, "%s: no duplicates", r.Client)
		assert.Zero(t, r.Errors, "%s: no background errors: %s", r.Client, r.FirstError)
		assert.Positive(t, r.MsgsPerSec, "%s: throughput", r.Client)
	}
	assert.Positive(t, c.Ratio.Throughput, "throughput ratio")
	return c
}

func TestBenchBaselineOnRedis(t *testing.T) {
	url := redistest.URL(t)
	for _, scenario := range []string{scenarioE2E, scenarioConsume, scenarioPublish} {
		t.Run(scenario, func(t *testing.T) {
			cfg := testBenchConfig(scenario)
			cfg.URL, cfg.N, cfg.Publishers = url, 2000, 2
			if scenario == scenarioE2E {
				cfg.Rate, cfg.Rounds = 20000, 2
			}
			c := baselineRun(t, cfg)
			assert.Equal(t, "go-redis", c.Raw.Client)
			if scenario == scenarioE2E {
				assert.Positive(t, c.Ratio.P99, "p99 ratio of a paced e2e run")
				for _, r := range []benchResult{c.Bus, c.Raw} {
					assert.True(t, r.Paced, "%s: send lateness measured", r.Client)
					assert.GreaterOrEqual(t, r.P99, r.SendLateP99, "%s: latency includes the send lateness", r.Client)
				}
				var out strings.Builder
				writeComparison(&out, cfg, 100, &c)
				assert.Contains(t, out.String(), "sent late p50", "the table shows how late each side sent")
				assert.Contains(t, out.String(), "sent late p99", "the table shows how late each side sent")
			}
		})
	}
	// The raw side deletes its stream key.
	opts, err := redis.ParseURL(url)
	require.NoError(t, err)
	rc := redis.NewClient(opts)
	defer rc.Close()
	keys, err := rc.Keys(context.Background(), "bus-bench-raw:*").Result()
	require.NoError(t, err)
	assert.Empty(t, keys, "the raw client's stream keys are deleted")
	keys, err = rc.Keys(context.Background(), "bus:{bus-bench.*").Result()
	require.NoError(t, err)
	assert.Empty(t, keys, "the bus side's topics, made up by the runs, are deleted")
}

func TestBenchBaselineOnNATSJetStream(t *testing.T) {
	url := natstest.Start(t).URL()
	for _, scenario := range []string{scenarioE2E, scenarioConsume} {
		t.Run(scenario, func(t *testing.T) {
			cfg := testBenchConfig(scenario)
			cfg.URL, cfg.N = url, 2000
			c := baselineRun(t, cfg)
			assert.Equal(t, "nats.go jetstream", c.Raw.Client)
		})
	}
	nc, err := natsgo.Connect(url)
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for info := range js.ListStreams(ctx).Info() {
		name := info.Config.Name
		assert.False(t, strings.HasPrefix(name, "BUS-BENCH-RAW"), "the raw client's stream %s is deleted", name)
		assert.NotContains(t, strings.Join(info.Config.Subjects, " "), "bus-bench.", "the bus side's stream %s, made up by a run, is deleted", name)
	}
}

// The raw clients name their stream, subject and group as long as the
// run's topic and group on the bus side, so both sides carry as many
// bytes of names per message.
func TestRawNamesAreAsLongAsTheBusSides(t *testing.T) {
	ctx := context.Background()
	cfg := testBenchConfig(scenarioConsume)
	cfg.URL = natstest.Start(t).URL()
	r := newBenchRun(cfg, "")
	nt, err := openNATSTarget(ctx, r)
	require.NoError(t, err)
	defer nt.close(ctx)
	n := nt.(*natsTarget)
	assert.Len(t, n.stream, len(r.topic), "the raw stream's name is as long as the topic")
	assert.Len(t, n.subject, len(r.topic), "the raw subject is as long as the topic")
	assert.Len(t, n.durable, len(r.group()), "the raw consumer's name is as long as the group")

	cfg.URL = redistest.URL(t)
	r = newBenchRun(cfg, "")
	rt, err := openRedisTarget(ctx, r)
	require.NoError(t, err)
	defer rt.close(ctx)
	rd := rt.(*redisTarget)
	assert.Len(t, rd.key, len(r.topic), "the raw stream key is as long as the topic")
	assert.Len(t, rd.group, len(r.group()), "the raw group is as long as the bus's")
}

func TestBenchBaselineOnCoreNATS(t *testing.T) {
	cfg := testBenchConfig(scenarioE2E)
	cfg.URL, cfg.N = natstest.Start(t).URL()+"?jetstream=false", 2000
	c := baselineRun(t, cfg)
	assert.Equal(t, "nats.go core", c.Raw.Client)
}

func TestAggregateTakesMediansAndTheWorstCounts(t *testing.T) {
	rs := []benchResult{
		{Client: "bus", N: 10, Seconds: 1, MsgsPerSec: 10, P50: 3, P99: 30, Max: 50, Delivered: 10, PeakHeapMiB: 2, Latency: "x", Paced: true, SendLateP50: 5, SendLateP99: 7},
		{Client: "bus", N: 10, Seconds: 3, MsgsPerSec: 30, P50: 1, P99: 10, Max: 90, Delivered: 9, Lost: 1, PeakHeapMiB: 1, Latency: "x", Errors: 2, FirstError: "boom", Paced: true, SendLateP50: 4, SendLateP99: 9},
		{Client: "bus", N: 10, Seconds: 2, MsgsPerSec: 20, P50: 2, P99: 20, Max: 70, Delivered: 10, PeakHeapMiB: 3, Latency: "x", Paced: true, SendLateP50: 6, SendLateP99: 8},
	}
	a := aggregate(rs)
	assert.InDelta(t, 2, a.Seconds, 1e-9, "median seconds")
	assert.InDelta(t, 20, a.MsgsPerSec, 1e-9, "median throughput")
	assert.EqualValues(t, 2, a.P50, "median p50")
	assert.EqualValues(t, 20, a.P99, "median p99")
	assert.True(t, a.Paced, "paced rounds stay paced")
	assert.EqualValues(t, 5, a.SendLateP50, "median send lateness p50")
	assert.EqualValues(t, 8, a.SendLateP99, "median send lateness p99")
	assert.EqualValues(t, 90, a.Max, "largest max")
	assert.InDelta(t, 3, a.PeakHeapMiB, 1e-9, "largest peak heap")
	assert.EqualValues(t, 1, a.Lost, "counts of the worst round")
	assert.EqualValues(t, 9, a.Delivered, "counts of the worst round")
	assert.EqualValues(t, 2, a.Errors, "errors add up")
	assert.Error(t, a.failure(), "a loss in any round fails the run")
}
