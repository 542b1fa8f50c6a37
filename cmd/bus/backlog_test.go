package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBenchBacklogComparesAutoscaleWithAFixedSweep(t *testing.T) {
	code, stdout, stderr := runCLI(t, "", "bench", "--scenario", "backlog", "--url", "mem://",
		"-n", "300", "--handler-delay", "1ms", "--autoscale-max", "4", "--json")
	require.Equal(t, exitOK, code, "the backlog scenario succeeds; stderr: %s", stderr)
	var res backlogResult
	require.NoError(t, json.Unmarshal([]byte(stdout), &res), "one JSON line: %s", stdout)
	labels := make([]string, len(res.Legs))
	for i, l := range res.Legs {
		labels[i] = l.Label
		assert.Positive(t, l.Seconds, "%s drained in a measured time", l.Label)
		assert.Zero(t, l.Lost, "%s lost nothing", l.Label)
	}
	assert.Equal(t, []string{"autoscale 1..4", "max-in-flight 4", "max-in-flight 2", "max-in-flight 1"}, labels, "autoscale, then the sweep from the top down")
	assert.Equal(t, 300, res.N)
	assert.InDelta(t, 1.0, res.HandlerDelayMs, 1e-9, "the handler delay is reported")
	assert.NotEmpty(t, res.Best, "the best fixed bound is named")
	assert.Positive(t, res.AutoscaleOverBest, "the ratio to the best fixed bound is computed")
	assert.Positive(t, res.OneOverAutoscale, "the ratio of max in flight 1 is computed")
	assert.Contains(t, stderr, "autoscale 1..4: drained in", "each run is reported as it ends")
}

func TestBenchBacklogTablePrintsRatiosAndTargets(t *testing.T) {
	code, stdout, stderr := runCLI(t, "", "bench", "--scenario", "backlog", "--url", "mem://",
		"-n", "100", "--handler-delay", "0s", "--autoscale-max", "2")
	require.Equal(t, exitOK, code, "stderr: %s", stderr)
	for _, want := range []string{"autoscale 1..2", "max-in-flight 1", "best fixed:", "autoscale / best fixed:", "targets:"} {
		assert.Contains(t, stdout, want, "the table shows %q", want)
	}
}

func TestBenchBacklogFlagsAreChecked(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"autoscale max elsewhere", []string{"--autoscale-max", "8"}, "--autoscale-max belongs"},
		{"autoscale max below one", []string{"--scenario", "backlog", "--autoscale-max", "0"}, "--autoscale-max 0"},
		{"handler delay elsewhere", []string{"--handler-delay", "1ms"}, "--handler-delay belongs"},
		{"baseline", []string{"--scenario", "backlog", "--baseline"}, "prefilled backlog"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, "", append([]string{"bench", "--url", "redis://127.0.0.1:1"}, tt.args...)...)
			assert.Equal(t, exitUsage, code, "a usage error before any I/O")
			assert.Contains(t, stderr, tt.want, "the error names the flag")
		})
	}
}

func TestBacklogCompareFindsTheBestFixedAndTheTargets(t *testing.T) {
	res := backlogResult{Legs: []backlogLeg{
		{Label: "autoscale 1..4", AutoscaleMax: 4, Seconds: 1.2},
		{Label: "max-in-flight 4", MaxInFlight: 4, Seconds: 1.0},
		{Label: "max-in-flight 2", MaxInFlight: 2, Seconds: 2.0},
		{Label: "max-in-flight 1", MaxInFlight: 1, Seconds: 6.0},
	}}
	res.compare()
	assert.Equal(t, "max-in-flight 4", res.Best)
	assert.InDelta(t, 1.2, res.AutoscaleOverBest, 1e-9)
	assert.InDelta(t, 5.0, res.OneOverAutoscale, 1e-9)
	assert.True(t, res.TargetsMet, "1.2x of the best and 5x over one meet the targets")
	res.Legs[0].Seconds = 1.6
	res.compare()
	assert.False(t, res.TargetsMet, "1.6x of the best misses them")
}
