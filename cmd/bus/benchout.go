package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// jsonResult is the one line bus bench --json prints; its keys are a
// stable interface for scripts. Figures a run did not measure are null.
type jsonResult struct {
	Backend  string `json:"backend"`
	Scenario string `json:"scenario"`
	N        int    `json:"n"`
	Size     int    `json:"size"`
	jsonFigures
	Latency     *string    `json:"latency"`
	AckMode     string     `json:"ack_mode"`
	Batch       int        `json:"batch"`
	Publishers  int        `json:"publishers"`
	MaxInFlight int        `json:"max_in_flight"`
	Rate        float64    `json:"rate"`
	CallerIDs   bool       `json:"caller_ids,omitempty"`
	GOGC        int        `json:"gogc"`
	Rounds      int        `json:"rounds,omitempty"`
	Baseline    *jsonSide  `json:"baseline,omitempty"`
	Ratio       *jsonRatio `json:"ratio,omitempty"`
}

// jsonFigures is what one side measured: the bus in jsonResult, the raw
// client in its baseline object (embedded, so the keys are the same).
type jsonFigures struct {
	Seconds      float64  `json:"seconds"`
	MsgsPerSec   float64  `json:"msgs_per_sec"`
	P50Ms        *float64 `json:"p50_ms"`
	P99Ms        *float64 `json:"p99_ms"`
	P999Ms       *float64 `json:"p999_ms"`
	Delivered    int64    `json:"delivered"`
	Duplicates   int64    `json:"duplicates"`
	Lost         int64    `json:"lost"`
	Late         int64    `json:"late"`
	Early        int64    `json:"early"`
	Violations   int64    `json:"order_violations"`
	AchievedRate *float64 `json:"achieved_rate"`
	RateShort    bool     `json:"rate_short"`
	// SendLateP50Ms and SendLateP99Ms: how late the paced publishers
	// sent against their schedule; null when unpaced.
	SendLateP50Ms *float64 `json:"send_late_p50_ms"`
	SendLateP99Ms *float64 `json:"send_late_p99_ms"`
	PeakHeapMiB   float64  `json:"peak_heap_mib"`
	// CPUUsPerMsg is the process's CPU time per message, in
	// microseconds; null when unknown.
	CPUUsPerMsg *float64 `json:"cpu_us_per_msg"`
}

// jsonSide is the raw client's figures in a --baseline result.
type jsonSide struct {
	Client string `json:"client"`
	jsonFigures
}

func (r *benchResult) figures() jsonFigures {
	lat := r.Latency != ""
	return jsonFigures{
		Seconds: r.Seconds, MsgsPerSec: r.MsgsPerSec,
		P50Ms: msIf(lat, r.P50), P99Ms: msIf(lat, r.P99), P999Ms: msIf(lat, r.P999),
		Delivered: r.Delivered, Duplicates: r.Duplicates, Lost: r.Lost, Late: r.Late, Early: r.Early, Violations: r.Violations,
		AchievedRate: nonZero(r.AchievedRate), RateShort: r.RateShort, PeakHeapMiB: r.PeakHeapMiB,
		SendLateP50Ms: msIf(r.Paced, r.SendLateP50), SendLateP99Ms: msIf(r.Paced, r.SendLateP99),
		CPUUsPerMsg: nonZero(float64(r.CPUPerMsg) / float64(time.Microsecond)),
	}
}

// jsonRatio is bus/raw: throughput, and latency quantiles when both
// sides measured latency (else null).
type jsonRatio struct {
	MsgsPerSec float64  `json:"msgs_per_sec"`
	P50        *float64 `json:"p50"`
	P99        *float64 `json:"p99"`
	P999       *float64 `json:"p999"`
	CPU        *float64 `json:"cpu_per_msg"`
}

// msIf is d in milliseconds when the run measured it, else nil (null).
func msIf(measured bool, d time.Duration) *float64 {
	if !measured {
		return nil
	}
	v := ms(d)
	return &v
}

func nonZero(v float64) *float64 {
	if v == 0 {
		return nil
	}
	return &v
}

func (r *benchResult) json(cfg benchConfig, gogc int) jsonResult {
	j := jsonResult{
		Backend: r.Backend, Scenario: r.Scenario, N: r.N, Size: r.Size,
		jsonFigures: r.figures(),
		AckMode:     string(cfg.AckMode), Batch: cfg.Batch, Publishers: cfg.Publishers, MaxInFlight: cfg.MaxInFlight,
		Rate: cfg.Rate, GOGC: gogc, CallerIDs: cfg.CallerIDs,
	}
	if r.Latency != "" {
		j.Latency = &r.Latency
	}
	return j
}

func (c *comparison) json(cfg benchConfig, gogc int) jsonResult {
	j := c.Bus.json(cfg, gogc)
	j.Rounds = c.Rounds
	j.Baseline = &jsonSide{Client: c.Raw.Client, jsonFigures: c.Raw.figures()}
	j.Ratio = &jsonRatio{MsgsPerSec: c.Ratio.Throughput, P50: nonZero(c.Ratio.P50), P99: nonZero(c.Ratio.P99), P999: nonZero(c.Ratio.P999), CPU: nonZero(c.Ratio.CPU)}
	return j
}

// settings is the one-line summary of the run's settings.
func settings(cfg benchConfig, gogc int) string {
	rate := "unpaced"
	if cfg.Rate > 0 {
		rate = fmt.Sprintf("%g msgs/s", cfg.Rate)
	}
	gc := "off"
	if gogc >= 0 {
		gc = fmt.Sprint(gogc)
	}
	ids := ""
	if cfg.CallerIDs {
		ids = ", caller-set IDs"
	}
	return fmt.Sprintf("ack %s, batch %d, %d publisher(s), %d in flight, rate %s, GOGC %s%s",
		cfg.AckMode, cfg.Batch, cfg.Publishers, cfg.MaxInFlight, rate, gc, ids)
}

// writeTable prints the readable summary of a run.
func writeTable(w io.Writer, cfg benchConfig, gogc int, r *benchResult) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, format string, a ...any) { fmt.Fprintf(tw, "%s\t"+format+"\n", append([]any{k}, a...)...) }
	row("backend", "%s", r.Backend)
	row("scenario", "%s", r.Scenario)
	row("messages", "%d x %d bytes", r.N, r.Size)
	row("settings", "%s", settings(cfg, gogc))
	row("seconds", "%.3f", r.Seconds)
	row("msgs/s", "%.0f", r.MsgsPerSec)
	if cfg.Rate > 0 {
		row("rate", "%s", rateLine(cfg, r))
	}
	if r.Latency != "" {
		row("latency", "p50 %s  p99 %s  p999 %s  max %s  (%s)", fmtMs(r.P50), fmtMs(r.P99), fmtMs(r.P999), fmtMs(r.Max), r.Latency)
	} else {
		row("latency", "-")
	}
	row("delivered", "%d", r.Delivered)
	row("duplicates", "%d", r.Duplicates)
	row("lost", "%d", r.Lost)
	row("late", "%d", r.Late)
	if r.Scenario == scenarioDelayed {
		row("early", "%d", r.Early)
	}
	if r.Scenario == scenarioKeyed {
		row("order violations", "%d", r.Violations)
	}
	if r.Foreign > 0 {
		row("foreign", "%d (messages on the topic not published by this run)", r.Foreign)
	}
	row("peak live heap", "%.1f MiB", r.PeakHeapMiB)
	row("cpu per message", "%s (the whole process: client, runtime and bench)", fmtCPU(r.CPUPerMsg))
	_ = tw.Flush()
}

// rateLine says what a paced run achieved against its target.
func rateLine(cfg benchConfig, r *benchResult) string {
	s := fmt.Sprintf("target %g msgs/s, achieved %.0f", cfg.Rate, r.AchievedRate)
	if r.Paced {
		s += fmt.Sprintf("; batches sent late by p50 %s, p99 %s", fmtMs(r.SendLateP50), fmtMs(r.SendLateP99))
	}
	if r.RateShort {
		s += " (SHORT of the target: the publishers fell behind their schedule)"
	}
	return s
}

// writeComparison prints the bus and the raw client side by side with
// the bus/raw ratios.
func writeComparison(w io.Writer, cfg benchConfig, gogc int, c *comparison) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	b, raw := &c.Bus, &c.Raw
	fmt.Fprintf(tw, "backend\t%s\n", b.Backend)
	fmt.Fprintf(tw, "scenario\t%s\n", b.Scenario)
	fmt.Fprintf(tw, "messages\t%d x %d bytes\n", b.N, b.Size)
	fmt.Fprintf(tw, "settings\t%s\n", settings(cfg, gogc))
	if c.Rounds > 1 {
		fmt.Fprintf(tw, "rounds\t%d, raw and bus alternating; figures are medians, ratios the median of the rounds' ratios\n", c.Rounds)
	}
	if b.Latency != "" {
		fmt.Fprintf(tw, "latency\t%s\n", b.Latency)
	}
	_ = tw.Flush()
	fmt.Fprintln(w)

	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "\tbus\t%s\tbus/raw\t\n", raw.Client)
	row := func(k, bv, rv, ratio string) { fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t\n", k, bv, rv, ratio) }
	row("msgs/s", fmt.Sprintf("%.0f", b.MsgsPerSec), fmt.Sprintf("%.0f", raw.MsgsPerSec), fmtRatio(c.Ratio.Throughput))
	row("seconds", fmt.Sprintf("%.3f", b.Seconds), fmt.Sprintf("%.3f", raw.Seconds), "")
	if cfg.Rate > 0 {
		row("achieved rate", fmt.Sprintf("%.0f", b.AchievedRate), fmt.Sprintf("%.0f", raw.AchievedRate), "")
		row("sent late p50", cellMs(b.Paced, b.SendLateP50), cellMs(raw.Paced, raw.SendLateP50), "")
		row("sent late p99", cellMs(b.Paced, b.SendLateP99), cellMs(raw.Paced, raw.SendLateP99), "")
	}
	bl, rl := b.Latency != "", raw.Latency != ""
	if bl || rl {
		row("p50", cellMs(bl, b.P50), cellMs(rl, raw.P50), fmtRatio(c.Ratio.P50))
		row("p99", cellMs(bl, b.P99), cellMs(rl, raw.P99), fmtRatio(c.Ratio.P99))
		row("p999", cellMs(bl, b.P999), cellMs(rl, raw.P999), fmtRatio(c.Ratio.P999))
		row("max", cellMs(bl, b.Max), cellMs(rl, raw.Max), "")
	} else {
		row("latency", "-", "-", "")
	}
	row("delivered", fmt.Sprint(b.Delivered), fmt.Sprint(raw.Delivered), "")
	row("duplicates", fmt.Sprint(b.Duplicates), fmt.Sprint(raw.Duplicates), "")
	row("lost", fmt.Sprint(b.Lost), fmt.Sprint(raw.Lost), "")
	row("late", fmt.Sprint(b.Late), fmt.Sprint(raw.Late), "")
	row("peak live heap", fmt.Sprintf("%.1f MiB", b.PeakHeapMiB), fmt.Sprintf("%.1f MiB", raw.PeakHeapMiB), "")
	row("cpu/msg", fmtCPU(b.CPUPerMsg), fmtCPU(raw.CPUPerMsg), fmtRatio(c.Ratio.CPU))
	_ = tw.Flush()
	for _, r := range []*benchResult{b, raw} {
		if r.Foreign > 0 {
			fmt.Fprintf(w, "%s: %d foreign messages (on the topic, not published by this run)\n", r.Client, r.Foreign)
		}
		if r.RateShort {
			fmt.Fprintf(w, "%s: %s\n", r.Client, rateLine(cfg, r))
		}
	}
}

func fmtRatio(v float64) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", v)
}

// fmtCPU is a CPU time per message in microseconds, or "-" when unknown.
func fmtCPU(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f µs", float64(d)/float64(time.Microsecond))
}

// cellMs is a table cell: d in milliseconds when measured, else "-".
func cellMs(measured bool, d time.Duration) string {
	if !measured {
		return "-"
	}
	return fmtMs(d)
}

func fmtMs(d time.Duration) string {
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.3f", ms(d)), "0"), ".") + " ms"
}
