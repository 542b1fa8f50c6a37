package main

import (
	"fmt"
	"runtime/metrics"
	"sync"
	"time"
)

// Heap metrics: the live heap is what the last GC marked live; before the
// first GC it reads 0 and the sampler falls back to the bytes of every
// allocated object, an upper bound.
const (
	liveHeapMetric    = "/gc/heap/live:bytes"
	heapObjectsMetric = "/memory/classes/heap/objects:bytes"
)

// sampleEvery is how often the sampler reads the heap and reports progress.
const sampleEvery = 200 * time.Millisecond

// sampler tracks the peak live heap of a run and, when progress is set,
// reports a one-line status every sampleEvery.
type sampler struct {
	r        *benchRun
	progress func(string)
	start    time.Time

	mu     sync.Mutex // guards sample and peak
	sample []metrics.Sample
	peak   uint64

	stopOnce sync.Once
	quit     chan struct{}
	done     chan struct{}
}

func startSampler(r *benchRun, progress func(string)) *sampler {
	s := &sampler{
		r: r, progress: progress, start: time.Now(),
		sample: []metrics.Sample{{Name: liveHeapMetric}, {Name: heapObjectsMetric}},
		quit:   make(chan struct{}), done: make(chan struct{}),
	}
	s.read()
	go s.loop()
	return s
}

func (s *sampler) loop() {
	defer close(s.done)
	t := time.NewTicker(sampleEvery)
	defer t.Stop()
	for {
		select {
		case <-s.quit:
			return
		case <-t.C:
			heap := s.read()
			if s.progress != nil {
				s.progress(s.status(heap))
			}
		}
	}
}

// read samples the live heap, updates the peak and returns the sample.
func (s *sampler) read() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	metrics.Read(s.sample)
	var v uint64
	for _, m := range s.sample {
		if m.Value.Kind() == metrics.KindUint64 {
			if v = m.Value.Uint64(); v > 0 {
				break
			}
		}
	}
	s.peak = max(s.peak, v)
	return v
}

func (s *sampler) status(heap uint64) string {
	el := time.Since(s.start).Seconds()
	sent := s.r.sent.Load()
	got := s.r.track.Delivered()
	rate := 0.0
	if el > 0 {
		rate = float64(max(sent, got)) / el
	}
	return fmt.Sprintf("%-8s %5.1fs  published %d/%d  delivered %d  %.0f msgs/s  heap %.1f MiB",
		*s.r.phase.Load(), el, sent, s.r.cfg.N, got, rate, mib(heap))
}

// stop ends the sampler and returns the peak live heap in MiB.
func (s *sampler) stop() float64 {
	s.stopOnce.Do(func() {
		close(s.quit)
		<-s.done
		s.read()
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	return mib(s.peak)
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// reset forgets the peak so far and samples afresh; the consume scenario
// calls it after the prefill, so the peak is that of the consume phase.
func (s *sampler) reset() {
	s.mu.Lock()
	s.peak = 0
	s.mu.Unlock()
	s.read()
}
