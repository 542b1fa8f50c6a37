package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"runtime/pprof"
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
)

func benchCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	a, code, ok := parseBenchArgs(args, stderr)
	if !ok {
		return code
	}
	if a.setGOGC {
		defer debug.SetGCPercent(debug.SetGCPercent(a.gogc))
	}
	effectiveGOGC := gcPercent()
	if a.cpuProfile != "" {
		stop, err := startCPUProfile(a.cpuProfile)
		if err != nil {
			fmt.Fprintf(stderr, "bus bench: %v\n", err)
			return exitFailure
		}
		defer stop()
	}
	if a.cfg.Scenario == scenarioBacklog {
		return reportBacklog(ctx, a.cfg, stdout, stderr)
	}
	return runAndReport(ctx, a.cfg, effectiveGOGC, stdout, stderr)
}

// benchArgs is the parsed command line of bus bench.
type benchArgs struct {
	cfg        benchConfig
	cpuProfile string
	gogc       int
	setGOGC    bool
}

// parseBenchArgs parses and checks a bus bench command line before any
// I/O.
func parseBenchArgs(args []string, stderr io.Writer) (*benchArgs, int, bool) {
	a := &benchArgs{}
	fs, ackMode := benchFlags(a, stderr)
	if code, ok := parseFlags(fs, args); !ok {
		return nil, code, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "bus bench: unexpected arguments %q\n", fs.Args())
		return nil, exitUsage, false
	}
	backlogDefaults(fs, &a.cfg)
	m, err := parseAckMode(*ackMode)
	if err != nil {
		fmt.Fprintf(stderr, "bus bench: --ack-mode: %v\n", err)
		return nil, exitUsage, false
	}
	a.cfg.AckMode = m
	verr := a.cfg.validate()
	if a.cfg.Baseline {
		verr = errors.Join(verr, checkBaselineURL(a.cfg.URL))
	}
	fs.Visit(func(f *flag.Flag) { a.setGOGC = a.setGOGC || f.Name == "gogc" })
	if a.setGOGC && a.gogc < -1 {
		verr = errors.Join(verr, fmt.Errorf("--gogc %d: want -1 (off) or more", a.gogc))
	}
	if verr != nil {
		fmt.Fprintf(stderr, "bus bench: %v\n", verr)
		return nil, exitUsage, false
	}
	return a, 0, true
}

// benchFlags declares the flags of bus bench into a; it returns the set
// and where the ack mode's name goes.
func benchFlags(a *benchArgs, stderr io.Writer) (*flag.FlagSet, *string) {
	fs := flag.NewFlagSet("bus bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := &a.cfg
	ackMode := fs.String("ack-mode", string(bus.AckOnSuccess), "on-success, on-receive or manual")
	fs.StringVar(&cfg.URL, "url", defaultURL(), "backend URL (default $BUS_URL, else mem://)")
	fs.IntVar(&cfg.N, "n", defaultBenchN, "number of messages")
	fs.IntVar(&cfg.Size, "size", defaultBenchSize, "payload size in bytes (>= 16)")
	fs.IntVar(&cfg.Publishers, "publishers", defaultPublishers, "concurrent publishing goroutines")
	fs.IntVar(&cfg.Batch, "batch", defaultBatch, "messages per Publish call")
	fs.IntVar(&cfg.MaxInFlight, "max-in-flight", defaultMaxInFlight, "max unsettled deliveries of the subscription")
	fs.StringVar(&cfg.Scenario, "scenario", scenarioE2E, "publish, consume (prefilled backlog), e2e (publish and consume at once) delayed (e2e with a DeliverAt --delay after each send; latency is lateness after it), keyed (e2e on a key-ordered group of --members members; order violations fail the run), backlog (drains a prefilled -n backlog, default 200000, with a --handler-delay handler: autoscaled, then with each fixed max in flight of a sweep) or outbox (e2e through the transactional outbox in --db: a transaction per batch, a relay to the bus; its baseline is INSERT then XADD)")
	fs.StringVar(&cfg.DB, "db", "", "the outbox scenario's PostgreSQL URL")
	fs.DurationVar(&cfg.Delay, "delay", time.Second, "the delayed scenario's DeliverAt, after each send")
	fs.IntVar(&cfg.Members, "members", 1, "the keyed scenario's members of the group, each a Bus of its own")
	fs.IntVar(&cfg.Partitions, "partitions", 1, "the keyed scenario's partitions of the topic, which the members share")
	fs.IntVar(&cfg.Keys, "keys", 0, "the keyed scenario's number of keys, given round robin")
	fs.DurationVar(&cfg.HandlerDelay, "handler-delay", 0, "the keyed and backlog scenarios' work per message in the handler (backlog default 1ms)")
	fs.IntVar(&cfg.AutoscaleMax, "autoscale-max", 0, "the backlog scenario's autoscale maximum (WithAutoscale(1, max)), also the top of its fixed max-in-flight sweep 1, 2, 4, ... (default 64)")
	fs.StringVar(&cfg.Topic, "topic", "", "topic (default: a new one per run)")
	fs.StringVar(&cfg.Events, "events", "", "write lifecycle events to this topic (bus.WithEvents), to measure what they cost")
	fs.BoolVar(&cfg.CallerIDs, "caller-ids", false, "give every message an ID of the publisher's (as a caller that retries Publish does), so the backend deduplicates it, to measure what that costs (the bus assigns IDs by default)")
	fs.DurationVar(&cfg.Timeout, "timeout", 0, "fail when the run takes longer (default 30s + 100µs per message, plus n/rate when paced)")
	fs.Float64Var(&cfg.Rate, "rate", 0, "messages per second over all publishers, a batch every batch/rate seconds; latency counts from each batch's scheduled time (0: as fast as possible)")
	fs.BoolVar(&cfg.Baseline, "baseline", false, "also run the raw client (a Go channel, go-redis or nats.go) with the same settings and print the bus/raw ratios")
	fs.IntVar(&cfg.Rounds, "rounds", 1, "with --baseline: raw and bus runs, alternating which goes first; figures are medians")
	fs.IntVar(&cfg.AsyncWindow, "async-window", 0, "the publish scenario's publishers emit one message per call and confirm later, within a window of this many messages: bus.PublishAsync (PublishBatching.Window), nats.go PublishMsgAsync with that many acks pending, go-redis with a pipeline of that depth (0: off)")
	fs.DurationVar(&cfg.ReportEvery, "report-every", 0, "the e2e scenario prints on stderr, every interval this long, the messages delivered in it, their rate and their p50, p99 and max latency; on postgres:// it prints the bus tables' sizes and dead rows at the end (0: off)")
	fs.BoolVar(&cfg.JSON, "json", false, "print one JSON line on stdout instead of the table")
	fs.StringVar(&a.cpuProfile, "cpuprofile", "", "write a CPU profile of the run to this file")
	fs.IntVar(&a.gogc, "gogc", 0, "garbage collector target percent for the run (like GOGC; -1 turns the collector off; default: the runtime's, $GOGC or 100)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: bus bench [flags]\n\nMeasures a backend: publish, consume or end-to-end throughput, latency,\nand whether every message arrived exactly once.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	return fs, ackMode
}

// runAndReport runs the benchmark (and its baseline), prints the table or
// the JSON line, and returns the exit code.
func runAndReport(ctx context.Context, cfg benchConfig, gogc int, stdout, stderr io.Writer) int {
	cfg.ReportTo = stderr
	var progress func(string)
	live := isTerminal(stderr)
	if live {
		progress = func(s string) { fmt.Fprintf(stderr, "\r\033[K%s", s) }
	}
	var (
		results []*benchResult // the sides, for the checks below
		out     any
		table   func()
		err     error
	)
	if cfg.Baseline {
		c, cerr := runComparison(ctx, cfg, progress)
		err = cerr
		results = []*benchResult{&c.Bus, &c.Raw}
		out = c.json(cfg, gogc)
		table = func() { writeComparison(stdout, cfg, gogc, &c) }
	} else {
		res, rerr := runBench(ctx, cfg, progress)
		err = rerr
		results = []*benchResult{&res}
		out = res.json(cfg, gogc)
		table = func() { writeTable(stdout, cfg, gogc, &res) }
	}
	if live {
		fmt.Fprint(stderr, "\r\033[K")
	}
	if err != nil && results[0].Seconds == 0 { // nothing was measured
		fmt.Fprintf(stderr, "bus bench: %v\n", err)
		return exitFailure
	}
	if cfg.ReportEvery > 0 && isPostgresURL(cfg.URL) {
		writePGTableStats(ctx, cfg.URL, stderr)
	}
	if cfg.JSON {
		if jerr := writeJSONLine(stdout, out); jerr != nil {
			fmt.Fprintf(stderr, "bus bench: %v\n", jerr)
			return exitFailure
		}
		fmt.Fprintf(stderr, "peak live heap: %.1f MiB\n", results[0].PeakHeapMiB)
	} else {
		table()
	}
	return exitOfResults(cfg, results, err, stderr)
}

// exitOfResults reports what went wrong on either side and returns the
// exit code: 1 when a message was lost or the run failed.
func exitOfResults(cfg benchConfig, results []*benchResult, err error, stderr io.Writer) int {
	code := exitOK
	for _, r := range results {
		if r.Errors > 0 {
			fmt.Fprintf(stderr, "bus bench: %s: %d background errors; first: %s\n", r.Client, r.Errors, r.FirstError)
		}
		if r.RateShort {
			fmt.Fprintf(stderr, "bus bench: %s: %s\n", r.Client, rateLine(cfg, r))
		}
		if ferr := r.failure(); ferr != nil {
			fmt.Fprintf(stderr, "bus bench: FAILED: %v\n", ferr)
			code = exitFailure
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "bus bench: %v\n", err)
		return exitFailure
	}
	return code
}

// parseAckMode reads an ack mode's name.
func parseAckMode(s string) (bus.AckMode, error) {
	for _, m := range []bus.AckMode{bus.AckOnSuccess, bus.AckOnReceive, bus.AckManual} {
		if string(m) == s {
			return m, nil
		}
	}
	return "", fmt.Errorf("unknown ack mode %q (on-success, on-receive or manual)", s)
}

// gcPercent returns the garbage collector's current target percent (-1:
// off) without changing it.
func gcPercent() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
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
