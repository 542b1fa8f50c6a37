package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// scenarioBacklog drains a prefilled backlog of -n messages with an
// I/O-bound handler (it sleeps --handler-delay, 1ms by default) once with
// bus.WithAutoscale(1, --autoscale-max) and once per fixed max in flight
// of the sweep 1, 2, 4, ... --autoscale-max, each run a consume run on a
// topic and group of its own, and compares the drain times.
const scenarioBacklog = "backlog"

// Defaults of the backlog scenario.
const (
	defaultBacklogN     = 200_000
	defaultBacklogWork  = time.Millisecond
	defaultAutoscaleMax = 64
)

// Targets the backlog scenario checks: autoscaling drains within
// backlogWithinBest of the best fixed bound's time, and at least
// backlogOverOne times faster than max in flight 1.
const (
	backlogWithinBest = 1.5
	backlogOverOne    = 5.0
)

// backlogConfig are the flags of the backlog scenario; AutoscaleMax also
// makes a consume run autoscale (WithAutoscale(1, AutoscaleMax) instead of
// WithMaxInFlight).
type backlogConfig struct {
	AutoscaleMax int
}

func (c *benchConfig) validateBacklog() []error {
	var errs []error
	if c.Scenario != scenarioBacklog {
		if c.AutoscaleMax != 0 {
			errs = append(errs, errors.New("--autoscale-max belongs to --scenario backlog"))
		}
		return errs
	}
	if c.AutoscaleMax < 1 {
		errs = append(errs, fmt.Errorf("--autoscale-max %d: want >= 1", c.AutoscaleMax))
	}
	if c.HandlerDelay < 0 {
		errs = append(errs, fmt.Errorf("--handler-delay %v: want >= 0", c.HandlerDelay))
	}
	if c.Baseline || c.Rate > 0 {
		errs = append(errs, errors.New("--baseline and --rate: the backlog scenario compares bus runs of a prefilled backlog"))
	}
	return errs
}

// backlogLeg is one drain of the backlog scenario.
type backlogLeg struct {
	Label        string  `json:"label"`
	MaxInFlight  int     `json:"max_in_flight,omitempty"`
	AutoscaleMax int     `json:"autoscale_max,omitempty"`
	Seconds      float64 `json:"seconds"`
	MsgsPerSec   float64 `json:"msgs_per_sec"`
	Lost         int64   `json:"lost"`
	Errors       int64   `json:"errors"`
	FirstError   string  `json:"first_error,omitempty"`
	failed       error
}

// backlogResult is what the backlog scenario measured; its JSON keys are
// a stable interface for scripts.
type backlogResult struct {
	Backend        string       `json:"backend"`
	Scenario       string       `json:"scenario"`
	N              int          `json:"n"`
	HandlerDelayMs float64      `json:"handler_delay_ms"`
	Legs           []backlogLeg `json:"runs"`
	// Best is the label of the fastest fixed max in flight.
	Best string `json:"best_fixed"`
	// AutoscaleOverBest is the autoscaled drain time over the best
	// fixed one (the target is at most backlogWithinBest).
	AutoscaleOverBest float64 `json:"autoscale_over_best"`
	// OneOverAutoscale is max in flight 1's drain time over the
	// autoscaled one (the target is at least backlogOverOne).
	OneOverAutoscale float64 `json:"one_over_autoscale"`
	TargetsMet       bool    `json:"targets_met"`
}

// backlogLegs lists the runs: autoscale first, then the fixed sweep from
// the largest bound down.
func backlogLegs(top int) []backlogLeg {
	legs := []backlogLeg{{Label: fmt.Sprintf("autoscale 1..%d", top), AutoscaleMax: top}}
	var fixed []int
	for n := 1; n < top; n *= 2 {
		fixed = append(fixed, n)
	}
	fixed = append(fixed, top)
	for i := len(fixed) - 1; i >= 0; i-- {
		legs = append(legs, backlogLeg{Label: fmt.Sprintf("max-in-flight %d", fixed[i]), MaxInFlight: fixed[i]})
	}
	return legs
}

// runBacklog runs every leg as a consume run and compares them; done,
// when not nil, is told each leg as it ends.
func runBacklog(ctx context.Context, cfg benchConfig, done func(backlogLeg)) (backlogResult, error) {
	res := backlogResult{Scenario: scenarioBacklog, N: cfg.N, HandlerDelayMs: ms(cfg.HandlerDelay), Legs: backlogLegs(cfg.AutoscaleMax)}
	for i := range res.Legs {
		leg := &res.Legs[i]
		lc := cfg
		lc.Scenario, lc.MaxInFlight, lc.AutoscaleMax = scenarioConsume, max(leg.MaxInFlight, 1), leg.AutoscaleMax
		r, err := runSide(ctx, lc, openBusTarget, leg.Label+": ", nil)
		if err != nil && r.Seconds == 0 {
			return res, fmt.Errorf("%s: %w", leg.Label, err)
		}
		res.Backend = r.Backend
		leg.Seconds, leg.MsgsPerSec, leg.Lost, leg.Errors, leg.FirstError = r.Seconds, r.MsgsPerSec, r.Lost, r.Errors, r.FirstError
		leg.failed = errors.Join(err, r.failure())
		if done != nil {
			done(*leg)
		}
	}
	res.compare()
	return res, nil
}

// compare finds the best fixed bound and the ratios.
func (res *backlogResult) compare() {
	auto, best, one := res.Legs[0], backlogLeg{}, backlogLeg{}
	for _, l := range res.Legs[1:] {
		if best.Seconds == 0 || l.Seconds < best.Seconds {
			best = l
		}
		if l.MaxInFlight == 1 {
			one = l
		}
	}
	res.Best = best.Label
	if auto.Seconds > 0 {
		res.AutoscaleOverBest = auto.Seconds / best.Seconds
		res.OneOverAutoscale = one.Seconds / auto.Seconds
	}
	res.TargetsMet = res.AutoscaleOverBest > 0 && res.AutoscaleOverBest <= backlogWithinBest && res.OneOverAutoscale >= backlogOverOne
}

// reportBacklog runs the backlog scenario, prints its table or JSON line,
// and returns the exit code: 1 when a run failed or lost messages.
func reportBacklog(ctx context.Context, cfg benchConfig, stdout, stderr io.Writer) int {
	res, err := runBacklog(ctx, cfg, func(l backlogLeg) {
		fmt.Fprintf(stderr, "bus bench: %s: drained in %.2f s\n", l.Label, l.Seconds)
	})
	if err != nil {
		fmt.Fprintf(stderr, "bus bench: %v\n", err)
		return exitFailure
	}
	if cfg.JSON {
		if err := writeJSONLine(stdout, res); err != nil {
			fmt.Fprintf(stderr, "bus bench: %v\n", err)
			return exitFailure
		}
	} else {
		writeBacklog(stdout, &res)
	}
	code := exitOK
	for _, l := range res.Legs {
		if l.Errors > 0 {
			fmt.Fprintf(stderr, "bus bench: %s: %d background errors; first: %s\n", l.Label, l.Errors, l.FirstError)
		}
		if l.failed != nil {
			fmt.Fprintf(stderr, "bus bench: FAILED: %s: %v\n", l.Label, l.failed)
			code = exitFailure
		}
	}
	return code
}

// writeBacklog prints the backlog scenario's table.
func writeBacklog(w io.Writer, res *backlogResult) {
	fmt.Fprintf(w, "backend %s, backlog of %d messages, handler %v of I/O each\n", res.Backend, res.N, time.Duration(res.HandlerDelayMs*float64(time.Millisecond)))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "run\tdrain s\tmsgs/s\tlost")
	for _, l := range res.Legs {
		fmt.Fprintf(tw, "%s\t%.2f\t%.0f\t%d\n", l.Label, l.Seconds, l.MsgsPerSec, l.Lost)
	}
	_ = tw.Flush()
	met := map[bool]string{true: "met", false: "MISSED"}
	fmt.Fprintf(w, "best fixed: %s\n", res.Best)
	fmt.Fprintf(w, "autoscale / best fixed: %.2fx (target <= %.1fx)\n", res.AutoscaleOverBest, backlogWithinBest)
	fmt.Fprintf(w, "max-in-flight 1 / autoscale: %.1fx (target >= %.0fx)\n", res.OneOverAutoscale, backlogOverOne)
	fmt.Fprintf(w, "targets: %s\n", met[res.TargetsMet])
}

// backlogDefaults gives the backlog scenario its defaults for the flags
// fs did not set.
func backlogDefaults(fs *flag.FlagSet, cfg *benchConfig) {
	if cfg.Scenario != scenarioBacklog {
		return
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["n"] {
		cfg.N = defaultBacklogN
	}
	if !set["handler-delay"] {
		cfg.HandlerDelay = defaultBacklogWork
	}
	if !set["autoscale-max"] {
		cfg.AutoscaleMax = defaultAutoscaleMax
	}
}
