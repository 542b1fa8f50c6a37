package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/eventbus-go/bus"
)

// Defaults of bus bench.
const (
	defaultBenchN      = 100_000
	defaultBenchSize   = 256
	defaultPublishers  = 1
	defaultBatch       = 16
	defaultMaxInFlight = 256
	// defaultGOGC trades some heap headroom for less collector work, as a
	// throughput-minded service would; live heap stays what it is.
	defaultGOGC = 400
)

func benchCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bus bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := benchConfig{}
	ackMode := bus.AckOnSuccess.String()
	fs.StringVar(&cfg.URL, "url", defaultURL(), "backend URL (default $BUS_URL, else mem://)")
	fs.IntVar(&cfg.N, "n", defaultBenchN, "number of messages")
	fs.IntVar(&cfg.Size, "size", defaultBenchSize, "payload size in bytes (>= 16)")
	fs.IntVar(&cfg.Publishers, "publishers", defaultPublishers, "concurrent publishing goroutines")
	fs.IntVar(&cfg.Batch, "batch", defaultBatch, "messages per Publish call")
	fs.IntVar(&cfg.MaxInFlight, "max-in-flight", defaultMaxInFlight, "max unsettled deliveries of the subscription")
	fs.StringVar(&ackMode, "ack-mode", ackMode, "on-success, on-receive or manual")
	fs.StringVar(&cfg.Scenario, "scenario", scenarioE2E, "publish, consume (prefilled backlog) or e2e (publish and consume at once)")
	fs.StringVar(&cfg.Topic, "topic", "", "topic (default: a new one per run)")
	fs.DurationVar(&cfg.Timeout, "timeout", 0, "fail when the run takes longer (default 30s + 100µs per message)")
	fs.BoolVar(&cfg.JSON, "json", false, "print one JSON line on stdout instead of the table")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the run to this file")
	gogc := fs.Int("gogc", defaultGOGC, "garbage collector target percent for the run (like GOGC; -1 turns the collector off; $GOGC wins when set)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: bus bench [flags]\n\nMeasures a backend: publish, consume or end-to-end throughput, latency,\nand whether every message arrived exactly once.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "bus bench: unexpected arguments %q\n", fs.Args())
		return exitUsage
	}
	m, err := bus.ParseAckMode(ackMode)
	if err != nil {
		fmt.Fprintf(stderr, "bus bench: --ack-mode: %v\n", err)
		return exitUsage
	}
	cfg.AckMode = m
	if err := cfg.validate(); err != nil {
		fmt.Fprintf(stderr, "bus bench: %v\n", err)
		return exitUsage
	}

	if os.Getenv("GOGC") == "" {
		defer debug.SetGCPercent(debug.SetGCPercent(*gogc))
	}

	if *cpuProfile != "" {
		stop, err := startCPUProfile(*cpuProfile)
		if err != nil {
			fmt.Fprintf(stderr, "bus bench: %v\n", err)
			return exitFailure
		}
		defer stop()
	}

	var progress func(string)
	live := isTerminal(stderr)
	if live {
		progress = func(s string) { fmt.Fprintf(stderr, "\r\033[K%s", s) }
	}
	res, err := runBench(ctx, cfg, progress)
	if live {
		fmt.Fprint(stderr, "\r\033[K")
	}
	if err != nil && res.Seconds == 0 { // nothing was measured
		fmt.Fprintf(stderr, "bus bench: %v\n", err)
		return exitFailure
	}
	if cfg.JSON {
		line, jerr := json.Marshal(res.json())
		if jerr != nil {
			fmt.Fprintf(stderr, "bus bench: %v\n", jerr)
			return exitFailure
		}
		fmt.Fprintf(stdout, "%s\n", line)
		fmt.Fprintf(stderr, "peak live heap: %.1f MiB\n", res.PeakHeapMiB)
	} else {
		writeTable(stdout, &res)
	}
	if res.Errors > 0 {
		fmt.Fprintf(stderr, "bus bench: the observer received %d background errors; first: %s\n", res.Errors, res.FirstError)
	}
	if err != nil {
		fmt.Fprintf(stderr, "bus bench: %v\n", err)
		return exitFailure
	}
	if ferr := res.failure(); ferr != nil {
		fmt.Fprintf(stderr, "bus bench: FAILED: %v\n", ferr)
		return exitFailure
	}
	return exitOK
}

// parseFlags parses args; ok is false when the command must end with code.
func parseFlags(fs *flag.FlagSet, args []string) (code int, ok bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK, false
		}
		return exitUsage, false
	}
	return 0, true
}

// writeTable prints the readable summary of a run.
func writeTable(w io.Writer, r *benchResult) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, format string, a ...any) { fmt.Fprintf(tw, "%s\t"+format+"\n", append([]any{k}, a...)...) }
	row("backend", "%s", r.Backend)
	row("scenario", "%s", r.Scenario)
	row("messages", "%d x %d bytes", r.N, r.Size)
	row("seconds", "%.3f", r.Seconds)
	row("msgs/s", "%.0f", r.MsgsPerSec)
	if r.Latency != "" {
		row("latency", "p50 %s  p99 %s  max %s  (%s)", fmtMs(r.P50), fmtMs(r.P99), fmtMs(r.Max), r.Latency)
	} else {
		row("latency", "-")
	}
	row("delivered", "%d", r.Delivered)
	row("duplicates", "%d", r.Duplicates)
	row("lost", "%d", r.Lost)
	if r.Foreign > 0 {
		row("foreign", "%d (messages on the topic not published by this run)", r.Foreign)
	}
	row("peak live heap", "%.1f MiB", r.PeakHeapMiB)
	_ = tw.Flush()
}

func fmtMs(d time.Duration) string {
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.3f", ms(d)), "0"), ".") + " ms"
}

// startCPUProfile profiles the process into path until stop is called.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// isTerminal reports whether w is a character device such as a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
