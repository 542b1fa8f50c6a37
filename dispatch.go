package bus

import (
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/eventbus-go/bus/internal/lifecycle"
)

// dispatcher runs deliveries on a pool of worker goroutines that grows on
// demand up to max in flight; at most a processor's worth of them
// (GOMAXPROCS) waits for work, and one more that runs out of work ends.
// Waking a parked goroutine costs more than handling a cheap message, so
// a batch wakes only as many workers as it needs: all of them while
// handlers are slow (they block on I/O), at most GOMAXPROCS while
// handlers are quick. A stall check runs every stallCheck while
// deliveries are queued. When fewer were taken since the last check than
// are queued now while every processor's worth of workers is in a
// handler, the running workers would not drain the queue by the next
// one, and every queued delivery gets a worker: a handler that turns slow
// never leaves deliveries waiting for long. Workers that keep up are left
// alone; a queue that is refilled as fast as it drains is not stalled,
// and neither is one whose woken workers wait for a processor (on a
// saturated machine more goroutines would only wait with them).
type dispatcher struct {
	// c runs the deliveries (consumer.process) and takes their slots back
	// (consumer.releaseDone), which workers give back in batches.
	c     *consumer
	acker *acker
	batch int // slots a worker gives back at once
	max   int
	procs int // GOMAXPROCS when the subscription started
	// stallAfter is the stall check's interval (stallCheck; tests set
	// their own).
	stallAfter time.Duration

	mu   sync.Mutex
	cond sync.Cond
	// queue holds the queued deliveries as runs of records allocated
	// together (see consumer.dispatch), oldest first: queue[head][next]
	// is the next to run, and n counts those queued. A batch is queued
	// with a pointer per run rather than per delivery, as each pointer
	// written while the collector marks costs a write barrier.
	queue   [][]record
	head    int
	next    int
	n       int
	workers int
	idle    int
	busy    int
	stopped bool
	stall   *time.Timer
	armed   bool
	taken   uint64 // deliveries the workers took from the queue
	// takenAtArm is taken when the stall check was last armed.
	takenAtArm uint64
	// slots holds, per worker, the delivery it runs now, for the lease
	// keeper to walk without a registration per message.
	slots []*workerSlot

	slowNanos atomic.Int64 // moving average of handler duration
	wg        sync.WaitGroup
}

// workerSlot is the delivery a worker runs now, or ran last (nil while
// the worker waits for work).
type workerSlot struct {
	cur atomic.Pointer[record]
	// timed says that the handler of the delivery the worker runs is
	// timed (nextLocked picks every sampleEvery-th delivery the
	// dispatcher runs); took is how long it ran (-1: it did not run).
	timed bool
	took  int64
	freed int // slots to give back
	// acks buffers the acks of the handlers the worker ran (see
	// consumer.ackAfterHandler), for the acker.
	acks *ackBuf
	// events stages the lifecycle events of the worker's handlers (nil
	// until the first); the worker flushes it before it waits for work,
	// and releases it when it ends.
	events *lifecycle.Stage
}

const (
	// slowHandler is the average handler duration above which every
	// queued delivery gets a worker of its own at once.
	slowHandler = 20 * time.Microsecond
	// stallCheck is how often the stall check looks at queued
	// deliveries.
	stallCheck = time.Millisecond
	// slowSampleCap is the most one sampled duration adds to the moving
	// average: a quick handler whose worker waited for a processor
	// while it ran (the collector stopped it, or the machine is
	// saturated) makes the average slow only when three samples in a
	// row do, while a handler that is slow every time makes it slow
	// after three.
	slowSampleCap = 2 * slowHandler
	// sampleEvery is how often a handler's duration is sampled: every
	// sampleEvery-th delivery the dispatcher runs, whichever worker
	// runs it. While handlers are slow, workers are many and short
	// lived (most run one delivery, then end), so a count of each
	// worker's own deliveries would seldom reach it.
	sampleEvery = 16
)

// newDispatcher returns a dispatcher of at most max workers for c. A
// worker gives the slots of the deliveries whose process reports true
// back to c, a batch at a time (an eighth of max), and all of them before
// it waits for work: a slot is never held by a worker with nothing to do.
func newDispatcher(c *consumer, max int, a *acker) *dispatcher {
	d := &dispatcher{c: c, acker: a, batch: (max + 7) / 8, max: max, procs: runtime.GOMAXPROCS(0), stallAfter: stallCheck}
	d.cond.L = &d.mu
	return d
}

// push queues deliveries one by one; the caller holds a slot for each.
func (p *dispatcher) push(ds []*record) {
	p.mu.Lock()
	for _, d := range ds {
		p.queue = append(p.queue, unsafe.Slice(d, 1))
	}
	p.queuedLocked(len(ds))
	p.mu.Unlock()
}

// pushRuns queues the n deliveries of runs, a batch of records allocated
// together (consumer.dispatch); the caller holds a slot for each.
func (p *dispatcher) pushRuns(runs [][]record, n int) {
	p.mu.Lock()
	p.queue = append(p.queue, runs...)
	p.queuedLocked(n)
	p.mu.Unlock()
}

// queuedLocked counts n deliveries just queued and wakes workers for
// them.
func (p *dispatcher) queuedLocked(n int) {
	p.n += n
	want := n
	if time.Duration(p.slowNanos.Load()) < slowHandler {
		// Quick handlers: a worker that is running will take the batch
		// when it is done, and one more worker per core is plenty.
		want = min(want, p.procs-p.busy)
	}
	if want > 0 {
		p.wakeLocked(want)
	}
	if !p.armed && p.queued() > 0 {
		p.armLocked()
	}
}

// armLocked starts the stall check.
func (p *dispatcher) armLocked() {
	p.armed = true
	p.takenAtArm = p.taken
	if p.stall == nil {
		p.stall = time.AfterFunc(p.stallAfter, p.checkStall)
	} else {
		p.stall.Reset(p.stallAfter)
	}
}

func (p *dispatcher) queued() int { return p.n }

// wakeLocked makes sure n more deliveries have a worker: it signals idle
// workers and starts new ones while under max.
func (p *dispatcher) wakeLocked(n int) {
	n = min(n, p.queued())
	for i := 0; i < n && i < p.idle; i++ {
		p.cond.Signal()
	}
	for extra := n - p.idle; extra > 0 && p.workers < p.max; extra-- {
		p.workers++
		p.wg.Add(1)
		w := &workerSlot{acks: p.acker.newBuf()}
		p.slots = append(p.slots, w)
		go p.work(w)
	}
}

func (p *dispatcher) checkStall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed = false
	if p.stopped || p.queued() == 0 {
		return
	}
	if p.taken-p.takenAtArm >= uint64(p.queued()) || p.busy < p.procs {
		// The workers drain the queue faster than this check runs, or
		// fewer are in handlers than there are processors: the queue
		// waits for woken workers to get a processor, not for
		// handlers, and more goroutines would only wait with them.
		// Look again later.
		p.armLocked()
		return
	}
	// Deliveries are waiting on handlers that do not return soon
	// enough: give every one of them a worker.
	p.wakeLocked(p.queued())
}

func (p *dispatcher) work(w *workerSlot) {
	defer p.wg.Done()
	defer func() {
		p.acker.dropBuf(w.acks)
		if w.events != nil {
			w.events.Release()
		}
	}()
	p.mu.Lock()
	for {
		d := p.nextLocked(w)
		if d == nil {
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		p.runOne(d, w)
		p.mu.Lock()
		p.busy--
		if p.stopped && p.busy == 0 && p.queued() == 0 {
			p.cond.Broadcast()
		}
	}
}

// nextLocked waits for the next queued delivery and takes it; it returns
// nil when the dispatcher has stopped and the worker must end. A worker
// gives back the slots it collected before it waits. p.mu is held (and
// released while waiting or giving slots back).
func (p *dispatcher) nextLocked(w *workerSlot) *record {
	for p.queued() == 0 {
		if w.events != nil && w.events.Pending() {
			p.mu.Unlock()
			w.events.Flush()
			p.mu.Lock()
			continue
		}
		if w.cur.Load() != nil {
			// The worker's last delivery stays in its slot while it
			// takes the next one at once (runOne); not while it waits.
			w.cur.Store(nil)
		}
		if w.freed > 0 {
			n := w.freed
			w.freed = 0
			p.mu.Unlock()
			p.c.releaseDone(n)
			p.mu.Lock()
			continue
		}
		if p.stopped || p.idle >= p.procs {
			// Stopped, or a processor's worth of workers waits for
			// work already: this one ends rather than wait with them.
			p.workers--
			if i := slices.Index(p.slots, w); i >= 0 {
				p.slots = slices.Delete(p.slots, i, i+1)
			}
			return nil
		}
		p.idle++
		p.cond.Wait()
		p.idle--
	}
	run := p.queue[p.head]
	d := &run[p.next]
	if p.next++; p.next == len(run) {
		p.queue[p.head] = nil
		p.head++
		p.next = 0
		if p.head == len(p.queue) {
			p.queue, p.head = p.queue[:0], 0
		}
	}
	p.n--
	p.taken++
	p.busy++
	w.timed = p.taken%sampleEvery == 0
	return d
}

// runOne runs d on w, samples the duration of its handler when w.timed
// says so (the handler alone: the bus's own work on a delivery is work
// for a processor, which more workers would not do sooner), and collects
// d's slot when it is the worker's to give back. d stays in the worker's
// slot once it returned, until the worker runs the next or waits for
// work (nextLocked): the lease keeper skips a delivery whose handler
// returned.
func (p *dispatcher) runOne(d *record, w *workerSlot) {
	w.cur.Store(d)
	if w.timed {
		w.took = -1
	}
	freed := p.c.process(d, w)
	if w.timed && w.took >= 0 {
		el := min(w.took, int64(slowSampleCap))
		avg := p.slowNanos.Load()
		p.slowNanos.Store(avg + (el-avg)/4)
	}
	if freed {
		if w.freed++; w.freed >= p.batch {
			p.c.releaseDone(w.freed)
			w.freed = 0
		}
	}
}

// running appends to ds the deliveries whose handler runs now, or that
// just returned.
func (p *dispatcher) running(ds []*record) []*record {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, w := range p.slots {
		if d := w.cur.Load(); d != nil {
			ds = append(ds, d)
		}
	}
	return ds
}

// inHandler counts the deliveries whose handler runs now.
func (p *dispatcher) inHandler() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := int64(0)
	for _, w := range p.slots {
		if d := w.cur.Load(); d != nil && d.state.Load()&stateInHandler != 0 {
			n++
		}
	}
	return n
}

// stop waits for queued and running deliveries to finish, then ends the
// workers. New pushes must have stopped.
func (p *dispatcher) stop() {
	p.mu.Lock()
	p.stopped = true
	p.wakeLocked(p.queued())
	p.cond.Broadcast()
	p.mu.Unlock()
	p.wg.Wait()
	p.mu.Lock()
	if p.stall != nil {
		p.stall.Stop()
	}
	p.mu.Unlock()
}
