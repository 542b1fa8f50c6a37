package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/observer"
)

// Scenarios of bus bench.
const (
	scenarioPublish = "publish"
	scenarioConsume = "consume"
	scenarioE2E     = "e2e"
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
	case scenarioPublish, scenarioConsume, scenarioE2E:
	default:
		errs = append(errs, fmt.Errorf("--scenario %q: want publish, consume or e2e", c.Scenario))
	}
	if c.Topic != "" {
		if err := bus.ValidateTopic(c.Topic); err != nil {
			errs = append(errs, fmt.Errorf("--topic: %w", err))
		}
	}
	if c.Timeout < 0 {
		errs = append(errs, fmt.Errorf("--timeout %v: want >= 0", c.Timeout))
	}
	return errors.Join(errs...)
}

// deadline is how long the run may take before it counts as timed out.
func (c *benchConfig) deadline() time.Duration {
	if c.Timeout > 0 {
		return c.Timeout
	}
	return 30*time.Second + time.Duration(c.N)*100*time.Microsecond
}

// benchResult is what a run measured.
type benchResult struct {
	Backend     string
	Scenario    string
	N           int
	Size        int
	Seconds     float64
	MsgsPerSec  float64
	P50         time.Duration
	P99         time.Duration
	Max         time.Duration
	Latency     string // what the latency figures measure; "" when none
	Delivered   int64
	Duplicates  int64
	Lost        int64
	Foreign     int64 // deliveries not stamped by this run
	PeakHeapMiB float64
	Errors      int64 // events the observer received
	FirstError  string
	TimedOut    bool
}

// jsonResult is the one line bus bench --json prints; its keys are a
// stable interface for scripts.
type jsonResult struct {
	Backend    string  `json:"backend"`
	Scenario   string  `json:"scenario"`
	N          int     `json:"n"`
	Size       int     `json:"size"`
	Seconds    float64 `json:"seconds"`
	MsgsPerSec float64 `json:"msgs_per_sec"`
	P50Ms      float64 `json:"p50_ms"`
	P99Ms      float64 `json:"p99_ms"`
	Delivered  int64   `json:"delivered"`
	Duplicates int64   `json:"duplicates"`
	Lost       int64   `json:"lost"`
}

func (r *benchResult) json() jsonResult {
	return jsonResult{
		Backend: r.Backend, Scenario: r.Scenario, N: r.N, Size: r.Size,
		Seconds: r.Seconds, MsgsPerSec: r.MsgsPerSec,
		P50Ms: ms(r.P50), P99Ms: ms(r.P99),
		Delivered: r.Delivered, Duplicates: r.Duplicates, Lost: r.Lost,
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// failure returns why the run counts as failed, or nil.
func (r *benchResult) failure() error {
	switch {
	case r.TimedOut:
		return fmt.Errorf("timed out: %d of %d messages delivered, %d lost", r.Delivered-r.Duplicates, r.N, r.Lost)
	case r.Lost > 0:
		return fmt.Errorf("%d of %d messages lost", r.Lost, r.N)
	}
	return nil
}

// benchRun is the state of one run shared by publishers, the handler and
// the sampler.
type benchRun struct {
	cfg    benchConfig
	b      *bus.Bus
	topic  string
	nonce  uint64
	epoch  time.Time // payload timestamps count from here
	lat    histogram
	track  *tracker
	sent   atomic.Int64 // messages accepted by Publish
	errs   atomic.Int64
	first  atomic.Pointer[string]
	phase  atomic.Pointer[string]
	timing atomic.Bool // the handler records latency
}

func (r *benchRun) observe(_ context.Context, e observer.Event) {
	r.errs.Add(1)
	msg := e.Scope.String() + ": " + e.Err.Error()
	r.first.CompareAndSwap(nil, &msg)
}

func (r *benchRun) setPhase(p string) { r.phase.Store(&p) }

// runBench runs one benchmark. progress, when not nil, is called about
// five times a second with a one-line status. The returned error is set
// when the run could not be carried out; a run that lost messages or timed
// out returns a result whose failure method says so.
func runBench(ctx context.Context, cfg benchConfig, progress func(string)) (benchResult, error) {
	if err := cfg.validate(); err != nil {
		return benchResult{}, err
	}
	r := &benchRun{cfg: cfg, nonce: rand.Uint64N(1 << (64 - nonceShift)), epoch: time.Now()}
	r.track = newTracker(int64(cfg.N))
	r.setPhase(cfg.Scenario)
	r.topic = cfg.Topic
	if r.topic == "" {
		r.topic = fmt.Sprintf("bus-bench.%s.%x", cfg.Scenario, time.Now().UnixNano())
	}

	b, err := bus.Open(ctx, cfg.URL, bus.WithObserver(observer.Func(r.observe)))
	if err != nil {
		return benchResult{}, err
	}
	r.b = b
	res := benchResult{Backend: backendName(b, cfg.URL), Scenario: cfg.Scenario, N: cfg.N, Size: cfg.Size}

	sampler := startSampler(r, progress)
	var runErr error
	switch cfg.Scenario {
	case scenarioPublish:
		runErr = r.runPublish(ctx, &res)
	case scenarioConsume:
		runErr = r.runConsume(ctx, &res)
	case scenarioE2E:
		runErr = r.runE2E(ctx, &res)
	}
	closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	if err := b.Close(closeCtx); err != nil && runErr == nil {
		runErr = fmt.Errorf("close: %w", err)
	}
	cancel()
	res.PeakHeapMiB = sampler.stop()

	if res.Seconds > 0 {
		res.MsgsPerSec = float64(cfg.N-int(res.Lost)) / res.Seconds
	}
	res.Errors = r.errs.Load()
	if p := r.first.Load(); p != nil {
		res.FirstError = *p
	}
	return res, runErr
}

func backendName(b *bus.Bus, rawURL string) string {
	if name := b.Capabilities().Name; name != "" {
		return name
	}
	if u, err := url.Parse(rawURL); err == nil {
		return u.Scheme
	}
	return "unknown"
}

// runPublish publishes n messages; latency is that of each Publish call.
func (r *benchRun) runPublish(ctx context.Context, res *benchResult) error {
	start := time.Now()
	err := r.publishAll(ctx, true)
	res.Seconds = time.Since(start).Seconds()
	res.Delivered = r.sent.Load()
	res.Lost = int64(r.cfg.N) - res.Delivered
	res.P50, res.P99, res.Max = r.lat.Quantile(0.5), r.lat.Quantile(0.99), r.lat.Max()
	res.Latency = "publish call (batch)"
	return err
}

// runConsume publishes n messages (not timed), then consumes them with a
// new group that starts from the oldest message.
func (r *benchRun) runConsume(ctx context.Context, res *benchResult) error {
	if !r.b.Capabilities().StartOldest {
		return fmt.Errorf("the consume scenario needs a backend that can start a group from the oldest message; %s cannot (use --scenario e2e)", res.Backend)
	}
	// Create the group before the prefill, so a backend that keeps only
	// part of a topic nobody subscribed to still owes the group every
	// message.
	sub, err := r.subscribe(ctx, bus.StartOldest)
	if err != nil {
		return err
	}
	if err := sub.Close(ctx); err != nil {
		return fmt.Errorf("create group: %w", err)
	}
	r.setPhase("prefill")
	if err := r.prefill(ctx); err != nil {
		return err
	}
	r.setPhase(scenarioConsume)
	start := time.Now()
	sub, err = r.subscribe(ctx, bus.StartOldest)
	if err != nil {
		return err
	}
	timedOut := r.waitFor(ctx, start, sub.Done(), nil, nil)
	res.Seconds = time.Since(start).Seconds()
	r.finish(ctx, sub, res, timedOut)
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
	tick := time.NewTicker(prefillStall)
	defer tick.Stop()
	last := int64(-1)
	for {
		select {
		case err := <-done:
			return err
		case <-tick.C:
			sent := r.sent.Load()
			if sent == last {
				cancel()
				<-done
				return fmt.Errorf("prefill stalled at %d of %d messages for %v: the backend's backlog limit may be below -n (for mem:// raise it, e.g. mem://?max_backlog=%d&max_backlog_bytes=%d)", sent, r.cfg.N, prefillStall, r.cfg.N, int64(r.cfg.N)*int64(r.cfg.Size+512))
			}
			last = sent
		}
	}
}

// runE2E subscribes, then publishes and consumes at once; latency runs
// from the publish call to the handler.
func (r *benchRun) runE2E(ctx context.Context, res *benchResult) error {
	sub, err := r.subscribe(ctx, bus.StartNewest)
	if err != nil {
		return err
	}
	r.timing.Store(true)
	pubCtx, cancelPub := context.WithCancel(ctx)
	defer cancelPub()
	start := time.Now()
	pubDone := make(chan struct{})
	var pubErr error
	go func() {
		defer close(pubDone)
		pubErr = r.publishAll(pubCtx, false)
	}()
	timedOut := r.waitFor(ctx, start, sub.Done(), pubDone, &pubErr)
	res.Seconds = time.Since(start).Seconds()
	cancelPub()
	<-pubDone
	r.finish(ctx, sub, res, timedOut)
	res.P50, res.P99, res.Max = r.lat.Quantile(0.5), r.lat.Quantile(0.99), r.lat.Max()
	res.Latency = "publish to handler"
	if pubErr != nil && !timedOut && ctx.Err() == nil {
		return pubErr
	}
	return ctx.Err()
}

func (r *benchRun) subscribe(ctx context.Context, from bus.StartFrom) (*bus.Subscription, error) {
	return r.b.Subscribe(ctx, r.topic, r.handle,
		bus.WithGroup(fmt.Sprintf("bench-%x", r.nonce)),
		bus.WithStartFrom(from),
		bus.WithAckMode(r.cfg.AckMode),
		bus.WithMaxInFlight(r.cfg.MaxInFlight),
	)
}

// handle is the bench handler: it checks the stamp, records latency and
// marks the sequence number.
func (r *benchRun) handle(ctx context.Context, d *bus.Delivery) error {
	p := d.Payload
	if len(p) >= stampSize {
		v := binary.LittleEndian.Uint64(p)
		if v>>nonceShift == r.nonce {
			if r.timing.Load() {
				r.lat.Record(time.Since(r.epoch) - time.Duration(binary.LittleEndian.Uint64(p[8:])))
			}
			r.track.mark(v & seqMask)
		} else {
			r.track.foreign.Add(1)
		}
	} else {
		r.track.foreign.Add(1)
	}
	if r.cfg.AckMode == bus.AckManual {
		return d.Ack(ctx)
	}
	return nil
}

// waitFor blocks until every message arrived, the deadline passed, ctx
// ended, the subscription stopped (subDone) or the publishers failed
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

// finish closes the subscription and fills in the delivery counts.
func (r *benchRun) finish(ctx context.Context, sub *bus.Subscription, res *benchResult, timedOut bool) {
	closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	if err := sub.Close(closeCtx); err != nil {
		msg := "close subscription: " + err.Error()
		r.first.CompareAndSwap(nil, &msg)
		r.errs.Add(1)
	}
	cancel()
	if err := sub.Err(); err != nil {
		msg := "subscription ended: " + err.Error()
		r.first.CompareAndSwap(nil, &msg)
		r.errs.Add(1)
	}
	res.Delivered = r.track.Delivered()
	res.Duplicates = r.track.dups.Load()
	res.Foreign = r.track.foreign.Load()
	res.Lost = int64(r.cfg.N) - r.track.Unique()
	res.TimedOut = timedOut
}

// publishAll publishes n messages from cfg.Publishers goroutines, each
// with its own batch of reused messages and payload buffers.
func (r *benchRun) publishAll(ctx context.Context, timeCalls bool) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	p, n := r.cfg.Publishers, r.cfg.N
	for i := range p {
		from, to := uint64(n*i/p), uint64(n*(i+1)/p)
		wg.Go(func() {
			if err := r.publishRange(ctx, from, to, timeCalls); err != nil {
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
	return first
}

func (r *benchRun) publishRange(ctx context.Context, from, to uint64, timeCalls bool) error {
	batch, size := r.cfg.Batch, r.cfg.Size
	buf := make([]byte, batch*size)
	msgs := make([]bus.Message, batch)
	ptrs := make([]*bus.Message, batch)
	for i := range msgs {
		msgs[i].Payload = buf[i*size : (i+1)*size : (i+1)*size]
		ptrs[i] = &msgs[i]
	}
	for seq := from; seq < to; {
		if err := ctx.Err(); err != nil {
			return err
		}
		k := int(min(uint64(batch), to-seq))
		now := uint64(time.Since(r.epoch))
		for i := range k {
			m := &msgs[i]
			m.ID = "" // the bus assigns a fresh ID, as for any application message
			binary.LittleEndian.PutUint64(m.Payload, r.nonce<<nonceShift|(seq+uint64(i)))
			binary.LittleEndian.PutUint64(m.Payload[8:], now)
		}
		var t0 time.Time
		if timeCalls {
			t0 = time.Now()
		}
		if err := r.b.Publish(ctx, r.topic, ptrs[:k]...); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("publish: %w", err)
		}
		if timeCalls {
			r.lat.Record(time.Since(t0))
		}
		r.sent.Add(int64(k))
		seq += uint64(k)
	}
	return nil
}
