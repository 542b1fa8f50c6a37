package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/cputime"
	"github.com/eventbus-go/bus/observer"
)

// Scenarios of bus bench.
const (
	scenarioPublish = "publish"
	scenarioConsume = "consume"
	scenarioE2E     = "e2e"
	// scenarioDelayed publishes every message with a DeliverAt --delay
	// after its send time and measures how late each arrives after it;
	// a message handled before its DeliverAt fails the run.
	scenarioDelayed = "delayed"
)

// stampSize is the prefix of every bench payload: a sequence number tagged
// with the run's nonce, then the publish time in nanoseconds since the run
// began (monotonic clock).
const stampSize = 16

// nonceShift puts the run nonce above the sequence number, so messages
// left on a topic by another run are told apart; it bounds n to 2^40.
const (
	nonceShift = 40
	seqMask    = 1<<nonceShift - 1
)

// benchConfig is the parsed command line of bus bench.
type benchConfig struct {
	URL         string
	N           int
	Size        int
	Publishers  int
	Batch       int
	MaxInFlight int
	AckMode     bus.AckMode
	Scenario    string
	Topic       string
	Timeout     time.Duration // 0: 30s plus 100µs per message
	JSON        bool
	Rate        float64       // messages per second over all publishers; 0: unpaced
	Baseline    bool          // also run the raw client and compare
	Rounds      int           // raw and bus runs, alternating, with Baseline; 0 means 1
	Delay       time.Duration // the delayed scenario's DeliverAt, after each send
	Events      string        // the lifecycle events topic (bus.WithEvents); "": off
	AsyncWindow int           // publish: one message per call, confirmed later within this window; 0: off
	CallerIDs   bool          // every message carries an ID its publisher set
	ReportEvery time.Duration // e2e: print the delivered rate and latency of every interval this long; 0: off
	ReportTo    io.Writer     // where the interval lines go
	keyedConfig
	backlogConfig
	outboxConfig
}

func (c *benchConfig) validate() error {
	var errs []error
	if c.N < 1 || c.N > seqMask {
		errs = append(errs, fmt.Errorf("-n %d: want 1..%d", c.N, seqMask))
	}
	if c.Size < stampSize || c.Size > bus.DefaultMaxPayload {
		errs = append(errs, fmt.Errorf("--size %d: want %d..%d (each payload carries a %d-byte sequence and timestamp)", c.Size, stampSize, bus.DefaultMaxPayload, stampSize))
	}
	if c.Publishers < 1 {
		errs = append(errs, fmt.Errorf("--publishers %d: want >= 1", c.Publishers))
	}
	if c.Batch < 1 {
		errs = append(errs, fmt.Errorf("--batch %d: want >= 1", c.Batch))
	}
	if c.MaxInFlight < 1 {
		errs = append(errs, fmt.Errorf("--max-in-flight %d: want >= 1", c.MaxInFlight))
	}
	switch c.Scenario {
	case scenarioPublish, scenarioConsume, scenarioE2E, scenarioKeyed, scenarioBacklog, scenarioOutbox:
	case scenarioDelayed:
		if c.Baseline {
			errs = append(errs, errors.New("--baseline: the raw clients have no delayed delivery to compare with"))
		}
		if c.Delay <= 0 {
			errs = append(errs, fmt.Errorf("--delay %v: want > 0", c.Delay))
		}
	default:
		errs = append(errs, fmt.Errorf("--scenario %q: want publish, consume, e2e, delayed, keyed, backlog or outbox", c.Scenario))
	}
	errs = append(errs, c.validateKeyed()...)
	errs = append(errs, c.validateBacklog()...)
	errs = append(errs, c.validateOutbox()...)
	if c.Topic != "" {
		if err := bus.ValidateTopic(c.Topic); err != nil {
			errs = append(errs, fmt.Errorf("--topic: %w", err))
		}
	}
	if c.AsyncWindow < 0 || c.AsyncWindow > 0 && c.Scenario != scenarioPublish {
		errs = append(errs, fmt.Errorf("--async-window %d: want >= 0, with --scenario publish", c.AsyncWindow))
	}
	if c.ReportEvery < 0 || c.ReportEvery > 0 && c.Scenario != scenarioE2E {
		errs = append(errs, fmt.Errorf("--report-every %v: want >= 0, with --scenario e2e", c.ReportEvery))
	}
	if c.Timeout < 0 {
		errs = append(errs, fmt.Errorf("--timeout %v: want >= 0", c.Timeout))
	}
	switch {
	case c.Rate < 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0):
		errs = append(errs, fmt.Errorf("--rate %v: want a finite rate >= 0 (0: as fast as possible)", c.Rate))
	case c.Rate > 0 && c.Scenario == scenarioConsume:
		errs = append(errs, fmt.Errorf("--rate %v: the consume scenario drains a prefilled backlog and is not paced (use --scenario e2e or publish)", c.Rate))
	}
	switch {
	case c.Rounds < 0:
		errs = append(errs, fmt.Errorf("--rounds %d: want >= 1", c.Rounds))
	case c.Rounds > 1 && !c.Baseline:
		errs = append(errs, fmt.Errorf("--rounds %d: rounds alternate the raw client and the bus; it needs --baseline", c.Rounds))
	}
	return errors.Join(errs...)
}

// rounds is how many raw and bus runs a baseline comparison makes.
func (c *benchConfig) rounds() int { return max(c.Rounds, 1) }

// deadline is how long the run may take before it counts as timed out.
// A paced run is given the time its schedule needs on top.
func (c *benchConfig) deadline() time.Duration {
	if c.Timeout > 0 {
		return c.Timeout
	}
	d := 30*time.Second + time.Duration(c.N)*100*time.Microsecond
	if c.Scenario == scenarioDelayed {
		d += c.Delay
	}
	if c.Scenario == scenarioKeyed && c.HandlerDelay > 0 {
		d += time.Duration(c.N) * c.HandlerDelay / time.Duration(max(min(c.Keys, c.Members*c.MaxInFlight), 1))
	}
	if c.Scenario == scenarioConsume && c.HandlerDelay > 0 {
		// A backlog run: twice the handlers' time at the bound.
		d += 2 * time.Duration(c.N) * c.HandlerDelay / time.Duration(max(c.MaxInFlight, 1))
	}
	if c.Rate > 0 {
		d += time.Duration(float64(c.N) / c.Rate * float64(time.Second))
	}
	return d
}

// batchInterval is the time between two batches of the paced schedule.
func (c *benchConfig) batchInterval() time.Duration {
	if c.Rate <= 0 {
		return 0
	}
	return time.Duration(float64(c.Batch) / c.Rate * float64(time.Second))
}

// rateShortfall is how far below the target a paced run may stay before
// it counts as having fallen short (the last batch's own latency and
// timer slack are in the measurement).
const rateShortfall = 0.95

// benchResult is what a run measured.
type benchResult struct {
	Backend      string
	Client       string // what was driven: "bus", or the raw client of a baseline
	Scenario     string
	N            int
	Size         int
	Seconds      float64
	MsgsPerSec   float64
	P50          time.Duration
	P99          time.Duration
	P999         time.Duration
	Max          time.Duration
	Latency      string  // what the latency figures measure; "" when none
	AchievedRate float64 // messages per second the paced publishers sent; 0 when unpaced
	RateShort    bool    // the paced publishers fell short of --rate
	Delivered    int64
	Duplicates   int64
	Lost         int64 // never arrived, and not held by the broker either
	Late         int64 // not arrived by the end of the run, still held by the broker
	Foreign      int64 // deliveries not stamped by this run
	Early        int64 // delayed: deliveries before their DeliverAt
	Violations   int64 // keyed: deliveries of a key after a later one of the key
	PeakHeapMiB  float64
	CPUPerMsg    time.Duration // user and system CPU of the process during the scenario, per message; 0 when unknown
	Errors       int64         // events the observer received, and raw client errors
	FirstError   string
	TimedOut     bool

	// SendLateP50 and SendLateP99 are how late the paced publishers sent
	// their batches against the schedule (timer wake-up and a publisher
	// behind schedule), which the latency figures include; Paced says
	// they were measured.
	SendLateP50, SendLateP99 time.Duration
	Paced                    bool
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// failure returns why the run counts as failed, or nil.
func (r *benchResult) failure() error {
	switch {
	case r.TimedOut:
		return fmt.Errorf("%s: timed out: %d of %d messages delivered, %d late (still held by the broker), %d lost", r.Client, r.Delivered-r.Duplicates, r.N, r.Late, r.Lost)
	case r.Lost > 0 || r.Late > 0:
		return fmt.Errorf("%s: %d of %d messages lost, %d late (still held by the broker)", r.Client, r.Lost, r.N, r.Late)
	case r.Early > 0:
		return fmt.Errorf("%s: %d messages handled before their DeliverAt", r.Client, r.Early)
	case r.Violations > 0:
		return fmt.Errorf("%s: %d messages handled out of their key's order", r.Client, r.Violations)
	}
	return nil
}

// setLatency fills in the latency figures of h.
func (r *benchResult) setLatency(h *histogram, what string) {
	if h.Count() == 0 {
		return
	}
	r.P50, r.P99, r.P999, r.Max = h.Quantile(0.5), h.Quantile(0.99), h.Quantile(0.999), h.Max()
	r.Latency = what
}

// benchRun is the state of one run shared by publishers, the handler and
// the sampler.
type benchRun struct {
	cfg    benchConfig
	t      target
	topic  string
	nonce  uint64
	epoch  time.Time // payload timestamps count from here
	lat    histogram
	win    atomic.Pointer[histogram] // the current interval's latency, with ReportEvery
	late   histogram                 // paced: how late each batch was sent against its schedule
	track  *tracker
	sent   atomic.Int64 // messages accepted by Publish
	errs   atomic.Int64
	first  atomic.Pointer[string]
	phase  atomic.Pointer[string]
	timing atomic.Bool  // the handler records latency
	early  atomic.Int64 // delayed: deliveries before their DeliverAt
	order  *orderCheck  // keyed: the order of every key

	// Set by publishAll when it returns.
	pubElapsed time.Duration // from the first batch's due time to the last batch's return
}

func newBenchRun(cfg benchConfig, label string) *benchRun {
	r := &benchRun{cfg: cfg, nonce: rand.Uint64N(1 << (64 - nonceShift)), epoch: time.Now()}
	r.track = newTracker(int64(cfg.N))
	if cfg.Scenario == scenarioKeyed {
		r.order = newOrderCheck(cfg.Keys)
	}
	r.setPhase(label + cfg.Scenario)
	r.topic = cfg.Topic
	if r.topic == "" {
		r.topic = fmt.Sprintf("bus-bench.%s.%x", cfg.Scenario, time.Now().UnixNano())
	}
	return r
}

// group is the run's consumer group on the bus.
func (r *benchRun) group() string { return fmt.Sprintf("bench-%x", r.nonce) }

// rawName returns name, padded with zeros to the length of like when
// shorter. The raw clients name their stream, subject and group as long
// as the run's topic and group that the bus side is given, so that both
// sides carry as many bytes of names per message (a JetStream delivery's
// subject and ack subject, a Redis read's reply and its XACK).
func rawName(name, like string) string {
	return name + strings.Repeat("0", max(0, len(like)-len(name)))
}

func (r *benchRun) observe(_ context.Context, e observer.Event) {
	if e.Err == nil {
		// A notice (a recovery after an outage, a scaling decision), not
		// an error.
		return
	}
	r.note(e.Scope.String() + ": " + e.Err.Error())
}

// note counts a background error and keeps the first.
func (r *benchRun) note(msg string) {
	r.errs.Add(1)
	r.first.CompareAndSwap(nil, &msg)
}

func (r *benchRun) setPhase(p string) { r.phase.Store(&p) }

// runBench runs one benchmark of the bus. progress, when not nil, is
// called about five times a second with a one-line status. The returned
// error is set when the run could not be carried out; a run that lost
// messages or timed out returns a result whose failure method says so.
func runBench(ctx context.Context, cfg benchConfig, progress func(string)) (benchResult, error) {
	if err := cfg.validate(); err != nil {
		return benchResult{}, err
	}
	return runSide(ctx, cfg, busOpener(cfg), "", progress)
}

// runSide runs one benchmark of the target open returns.
func runSide(ctx context.Context, cfg benchConfig, open openTarget, label string, progress func(string)) (benchResult, error) {
	r := newBenchRun(cfg, label)
	t, err := open(ctx, r)
	if err != nil {
		return benchResult{}, err
	}
	r.t = t
	res := benchResult{Backend: t.backend(), Client: t.client(), Scenario: cfg.Scenario, N: cfg.N, Size: cfg.Size}

	// Start from a collected heap, so the peak is this run's and not
	// garbage left by an earlier one.
	runtime.GC()
	sampler := startSampler(r, progress)
	cpu0 := cputime.Process()
	var runErr error
	switch cfg.Scenario {
	case scenarioPublish:
		runErr = r.runPublish(ctx, &res)
	case scenarioConsume:
		runErr = r.runConsume(ctx, &res, sampler)
	case scenarioE2E, scenarioDelayed, scenarioKeyed, scenarioOutbox:
		runErr = r.runE2E(ctx, &res)
	}
	if cpu := cputime.Process() - cpu0; cpu0 > 0 && cpu > 0 {
		res.CPUPerMsg = cpu / time.Duration(cfg.N)
	}
	res.Early = r.early.Load()
	if r.order != nil {
		res.Violations = r.order.count()
	}
	closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	if err := t.close(closeCtx); err != nil && runErr == nil {
		runErr = fmt.Errorf("close: %w", err)
	}
	cancel()
	res.PeakHeapMiB = sampler.stop()

	if res.Seconds > 0 {
		res.MsgsPerSec = float64(cfg.N-int(res.Lost+res.Late)) / res.Seconds
	}
	if cfg.Rate > 0 && r.pubElapsed > 0 {
		res.AchievedRate = float64(r.sent.Load()) / r.pubElapsed.Seconds()
		res.RateShort = res.AchievedRate < rateShortfall*cfg.Rate
	}
	if r.late.Count() > 0 {
		res.Paced = true
		res.SendLateP50, res.SendLateP99 = r.late.Quantile(0.5), r.late.Quantile(0.99)
	}
	res.Errors = r.errs.Load()
	if p := r.first.Load(); p != nil {
		res.FirstError = *p
	}
	return res, runErr
}

// runPublish publishes n messages; latency is that of each Publish call,
// counted from the batch's scheduled time when paced.
func (r *benchRun) runPublish(ctx context.Context, res *benchResult) error {
	if err := r.t.prepare(ctx, scenarioPublish); err != nil {
		return err
	}
	start := time.Now()
	err := r.publishAll(ctx, true)
	res.Seconds = time.Since(start).Seconds()
	res.Delivered = r.sent.Load()
	res.Lost = int64(r.cfg.N) - res.Delivered
	what := "publish call (batch)"
	if r.cfg.AsyncWindow > 0 {
		what = "publish calls of a batch, not their confirmation"
	}
	if r.cfg.Rate > 0 {
		what = "scheduled send to publish return (batch)"
	}
	res.setLatency(&r.lat, what)
	return err
}

// runConsume publishes n messages (not timed), then consumes them with a
// new group, created before the prefill (see target.prepare). The peak
// heap is that of the consume phase.
func (r *benchRun) runConsume(ctx context.Context, res *benchResult, s *sampler) error {
	// The group is created before the prefill, so a backend that keeps
	// only part of a topic nobody subscribed to still owes it every
	// message.
	if err := r.t.prepare(ctx, scenarioConsume); err != nil {
		return err
	}
	label := *r.phase.Load()
	r.setPhase("prefill")
	if err := r.prefill(ctx); err != nil {
		return err
	}
	r.setPhase(label)
	runtime.GC()
	s.reset()
	start := time.Now()
	c, err := r.t.subscribe(ctx, r.handle)
	if err != nil {
		return err
	}
	timedOut := r.waitFor(ctx, start, c.done(), nil, nil)
	res.Seconds = time.Since(start).Seconds()
	r.finish(ctx, c, res, timedOut)
	return ctx.Err()
}

// prefillStall is how long the prefill may make no progress before the
// consume scenario gives up (a variable so tests can shorten it).
var prefillStall = 10 * time.Second

// prefill publishes the backlog of the consume scenario. It fails when no
// Publish completes for prefillStall, which is what a backend whose backlog
// limit is below n does (Publish waits for room that never comes).
func (r *benchRun) prefill(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.publishAll(ctx, false) }()
	tick := time.NewTicker(prefillStall / 10)
	defer tick.Stop()
	last, since := int64(-1), time.Now()
	for {
		select {
		case err := <-done:
			return err
		case now := <-tick.C:
			sent := r.sent.Load()
			if sent != last {
				last, since = sent, now
				continue
			}
			if stalled := now.Sub(since); stalled >= prefillStall {
				cancel()
				<-done
				return fmt.Errorf("prefill stalled at %d of %d messages: no publish completed for %v; the backend's backlog limit may be below -n (for mem:// raise it, e.g. mem://?max_backlog=%d&max_backlog_bytes=%d)",
					sent, r.cfg.N, stalled.Round(time.Millisecond), r.cfg.N, memBacklogBytes(r.cfg))
			}
		}
	}
}

// runE2E subscribes, then publishes and consumes at once; latency runs
// from the publish call (or, when paced, the batch's scheduled time) to
// the handler.
func (r *benchRun) runE2E(ctx context.Context, res *benchResult) error {
	if err := r.t.prepare(ctx, scenarioE2E); err != nil {
		return err
	}
	c, err := r.t.subscribe(ctx, r.handle)
	if err != nil {
		return err
	}
	r.timing.Store(true)
	report := startIntervalReport(r)
	pubCtx, cancelPub := context.WithCancel(ctx)
	defer cancelPub()
	start := time.Now()
	pubDone := make(chan struct{})
	var pubErr error
	go func() {
		defer close(pubDone)
		pubErr = r.publishAll(pubCtx, false)
	}()
	timedOut := r.waitFor(ctx, start, c.done(), pubDone, &pubErr)
	res.Seconds = time.Since(start).Seconds()
	report.stop()
	select {
	case <-r.track.done:
		// Every message arrived; the last publish calls may still wait
		// for their acks: let them return, within the deadline.
		grace := time.NewTimer(max(r.cfg.deadline()-time.Since(start), time.Second))
		select {
		case <-pubDone:
		case <-grace.C:
		case <-ctx.Done():
		}
		grace.Stop()
	default:
	}
	cancelPub()
	<-pubDone
	r.finish(ctx, c, res, timedOut)
	what := "publish call to handler"
	switch {
	case r.cfg.Scenario == scenarioDelayed:
		what = "DeliverAt to handler"
	case r.cfg.Rate > 0:
		what = "scheduled send to handler"
	}
	res.setLatency(&r.lat, what)
	if pubErr != nil && !timedOut && ctx.Err() == nil {
		return pubErr
	}
	return ctx.Err()
}

// stampDue restamps the payloads of a delayed batch sent at sent with
// their DeliverAt, --delay later, which the broker keeps to the
// millisecond; it returns the new stamp.
func (r *benchRun) stampDue(payloads [][]byte, sent time.Duration) time.Duration {
	due := r.epoch.Add(sent + r.cfg.Delay).Truncate(time.Millisecond).Sub(r.epoch)
	for _, p := range payloads {
		binary.LittleEndian.PutUint64(p[8:], uint64(due))
	}
	return due
}

// seqOf returns the sequence number of a payload this run stamped.
func (r *benchRun) seqOf(p []byte) (uint64, bool) {
	if len(p) < stampSize {
		return 0, false
	}
	v := binary.LittleEndian.Uint64(p)
	return v & seqMask, v>>nonceShift == r.nonce
}

// handle is the bench handler of every target: it checks the stamp,
// records latency and marks the sequence number.
func (r *benchRun) handle(p []byte) {
	if len(p) < stampSize {
		r.track.foreign.Add(1)
		return
	}
	v := binary.LittleEndian.Uint64(p)
	if v>>nonceShift != r.nonce {
		r.track.foreign.Add(1)
		return
	}
	if r.timing.Load() {
		d := time.Since(r.epoch) - time.Duration(binary.LittleEndian.Uint64(p[8:]))
		if d < 0 {
			r.early.Add(1) // only a delayed stamp is in the future
			d = 0
		}
		r.lat.Record(d)
		recordWindow(&r.win, d)
	}
	r.track.mark(v & seqMask)
}

// waitFor blocks until every message arrived, the deadline passed, ctx
// ended, the consumer stopped (subDone) or the publishers failed
// (pubDone closed with *pubErr set). It reports whether the deadline
// passed.
func (r *benchRun) waitFor(ctx context.Context, start time.Time, subDone, pubDone <-chan struct{}, pubErr *error) bool {
	timer := time.NewTimer(r.cfg.deadline() - time.Since(start))
	defer timer.Stop()
	for {
		select {
		case <-r.track.done:
			return false
		case <-timer.C:
			return true
		case <-ctx.Done():
			return false
		case <-subDone:
			return false
		case <-pubDone:
			if *pubErr != nil {
				return false
			}
			pubDone = nil
		}
	}
}

// finish stops the consumer and fills in the delivery counts.
func (r *benchRun) finish(ctx context.Context, c consumer, res *benchResult, timedOut bool) {
	closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	if err := c.stop(closeCtx); err != nil {
		r.note("close subscription: " + err.Error())
	}
	cancel()
	if err := c.err(); err != nil {
		r.note("subscription ended: " + err.Error())
	}
	res.Delivered = r.track.Delivered()
	res.Duplicates = r.track.dups.Load()
	res.Foreign = r.track.foreign.Load()
	res.Lost = int64(r.cfg.N) - r.track.Unique()
	res.TimedOut = timedOut
	r.splitLate(ctx, res)
}

// publishAll publishes n messages from cfg.Publishers goroutines. The
// messages form batches of cfg.Batch, numbered in sequence order;
// publisher i sends batches i, i+P, i+2P and so on. Unpaced, each sends
// its next batch as soon as the last returned; paced (cfg.Rate > 0),
// batch g is due g×Batch/Rate after the start, its payloads carry that
// due time instead of the send time, and a publisher behind schedule
// sends at once, so latency counts the wait a slow system causes
// (no coordinated omission).
func (r *benchRun) publishAll(ctx context.Context, timeCalls bool) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	start := time.Since(r.epoch)
	for i := range r.cfg.Publishers {
		wg.Go(func() {
			if err := r.publishBatches(ctx, i, start, timeCalls); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
				cancel()
			}
		})
	}
	wg.Wait()
	// The schedule of G batches spans G intervals; the last one starts
	// at (G-1) intervals.
	r.pubElapsed = time.Since(r.epoch) - start + r.cfg.batchInterval()
	return first
}

// waitUntil waits until due (since the run's epoch) on *timer, made on
// first use.
func (r *benchRun) waitUntil(ctx context.Context, timer **time.Timer, due time.Duration) error {
	wait := due - time.Since(r.epoch)
	if wait <= 0 {
		return nil
	}
	if *timer == nil {
		*timer = time.NewTimer(wait)
	} else {
		(*timer).Reset(wait)
	}
	select {
	case <-(*timer).C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// publishBatches is publisher i of publishAll; start is the schedule's
// origin since r.epoch.
func (r *benchRun) publishBatches(ctx context.Context, i int, start time.Duration, timeCalls bool) error {
	pub, err := r.t.publisher(ctx)
	if err != nil {
		return err
	}
	batch, size, n := r.cfg.Batch, r.cfg.Size, uint64(r.cfg.N)
	interval := r.cfg.batchInterval()
	buf := make([]byte, batch*size)
	payloads := make([][]byte, batch)
	for j := range payloads {
		payloads[j] = buf[j*size : (j+1)*size : (j+1)*size]
	}
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for g := uint64(i); g*uint64(batch) < n; g += uint64(r.cfg.Publishers) {
		if err := ctx.Err(); err != nil {
			return err
		}
		seq := g * uint64(batch)
		k := int(min(uint64(batch), n-seq))
		stamp := time.Since(r.epoch)
		if interval > 0 {
			due := start + time.Duration(g)*interval
			if err := r.waitUntil(ctx, &timer, due); err != nil {
				return err
			}
			stamp = due
			r.late.Record(time.Since(r.epoch) - due)
		}
		for j := range k {
			binary.LittleEndian.PutUint64(payloads[j], r.nonce<<nonceShift|(seq+uint64(j)))
			binary.LittleEndian.PutUint64(payloads[j][8:], uint64(stamp))
		}
		if interval == 0 {
			stamp = time.Since(r.epoch) // an unpaced call is timed from its start
		}
		if r.cfg.Scenario == scenarioDelayed {
			stamp = r.stampDue(payloads[:k], stamp)
		}
		if err := pub.publish(ctx, payloads[:k]); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("publish: %w", err)
		}
		if timeCalls {
			r.lat.Record(time.Since(r.epoch) - stamp)
		}
		r.sent.Add(int64(k))
	}
	if f, ok := pub.(flusher); ok {
		if failed, err := f.flush(ctx); err != nil {
			r.sent.Add(-int64(failed))
			return fmt.Errorf("publish: %w", err)
		}
	}
	return nil
}
