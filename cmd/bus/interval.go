package main

import (
	"fmt"
	"io"
	"sync/atomic"
	"time"
)

// intervalReport prints, every cfg.ReportEvery of an e2e run, one line:
// the messages delivered in the interval, their rate, and the latency
// quantiles of the deliveries in it. The handler records into the
// current interval's histogram (benchRun.win) beside the run's.
type intervalReport struct {
	r     *benchRun
	out   io.Writer
	every time.Duration
	start time.Time
	quit  chan struct{}
	done  chan struct{}
}

// startIntervalReport starts the report of r, or returns nil when
// cfg.ReportEvery is 0.
func startIntervalReport(r *benchRun) *intervalReport {
	if r.cfg.ReportEvery <= 0 || r.cfg.ReportTo == nil {
		return nil
	}
	ir := &intervalReport{r: r, out: r.cfg.ReportTo, every: r.cfg.ReportEvery, start: time.Now(),
		quit: make(chan struct{}), done: make(chan struct{})}
	r.win.Store(new(histogram))
	go ir.loop()
	return ir
}

func (ir *intervalReport) loop() {
	defer close(ir.done)
	t := time.NewTicker(ir.every)
	defer t.Stop()
	var last int64
	from := ir.start
	for {
		select {
		case <-ir.quit:
			ir.line(from, time.Now(), &last)
			return
		case now := <-t.C:
			ir.line(from, now, &last)
			from = now
		}
	}
}

// line prints the interval from..to and starts the next one.
func (ir *intervalReport) line(from, to time.Time, last *int64) {
	h := ir.r.win.Swap(new(histogram))
	got := ir.r.track.Delivered()
	n := got - *last
	*last = got
	secs := to.Sub(from).Seconds()
	rate := 0.0
	if secs > 0 {
		rate = float64(n) / secs
	}
	fmt.Fprintf(ir.out, "interval %s %7.1fs  delivered %d  %.0f msgs/s  p50 %s  p99 %s  max %s\n",
		ir.r.t.client(), to.Sub(ir.start).Seconds(), n, rate, fmtMs(h.Quantile(0.5)), fmtMs(h.Quantile(0.99)), fmtMs(h.Max()))
}

// stop prints the last, partial interval and ends the report.
func (ir *intervalReport) stop() {
	if ir == nil {
		return
	}
	close(ir.quit)
	<-ir.done
}

// recordWindow adds d to the current interval's histogram, if any.
func recordWindow(w *atomic.Pointer[histogram], d time.Duration) {
	if h := w.Load(); h != nil {
		h.Record(d)
	}
}
