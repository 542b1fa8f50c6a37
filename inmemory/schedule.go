package inmemory

import (
	"container/heap"
	"time"

	"github.com/eventbus-go/bus/backend"
)

// schedule holds a topic's entries published with a DeliverAt still to
// come (backend.HeaderDeliverAt) until they are due, then appends them to
// the log: no group sees them before. They count against the backlog
// from the moment they were published. Guarded by the topic's mu.
type schedule struct {
	q      schedQueue
	seq    uint64
	timer  *time.Timer
	armed  int64 // the due time the timer is set for (0: none)
	closed bool
}

// held is one scheduled entry.
type held struct {
	due int64  // Unix milliseconds
	seq uint64 // publish order, for entries due at the same time
	e   entry
}

type schedQueue []*held

func (q schedQueue) Len() int { return len(q) }
func (q schedQueue) Less(i, j int) bool {
	return q[i].due < q[j].due || q[i].due == q[j].due && q[i].seq < q[j].seq
}
func (q schedQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *schedQueue) Push(x any)   { *q = append(*q, x.(*held)) }
func (q *schedQueue) Pop() any {
	old := *q
	h := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return h
}

// hold stores the admitted batch es: the entries due now go to the log,
// in order, the others wait in the schedule. mu is held.
func (t *topic) hold(es []entry) {
	now := make([]entry, 0, len(es))
	s := &t.sched
	ms := time.Now().UnixMilli()
	for i := range es {
		due := dueOf(&es[i])
		if due <= ms {
			now = append(now, es[i])
			continue
		}
		s.seq++
		heap.Push(&s.q, &held{due: due, seq: s.seq, e: es[i]})
	}
	if len(now) > 0 {
		t.insert(now)
	}
	t.armSchedule()
}

// dueOf is e's DeliverAt in Unix ms (0: none).
func dueOf(e *entry) int64 {
	if at, ok := backend.HeaderTime(e.headers(), backend.HeaderDeliverAt); ok {
		return at.UnixMilli()
	}
	return 0
}

// armSchedule sets the timer for the earliest scheduled entry. mu is
// held.
func (t *topic) armSchedule() {
	s := &t.sched
	if s.closed || len(s.q) == 0 || s.armed != 0 && s.armed <= s.q[0].due {
		return
	}
	if s.timer != nil {
		s.timer.Stop()
	}
	s.armed = s.q[0].due
	s.timer = time.AfterFunc(time.Until(time.UnixMilli(s.armed)), t.promote)
}

// promote appends the entries that are due to the log, in due order, and
// sets the timer for the next.
func (t *topic) promote() {
	t.lock()
	defer t.unlock()
	s := &t.sched
	s.armed = 0
	if s.closed {
		return
	}
	now := time.Now().UnixMilli()
	var due []entry
	for len(s.q) > 0 && s.q[0].due <= now {
		due = append(due, heap.Pop(&s.q).(*held).e)
	}
	if len(due) > 0 {
		t.insert(due)
	}
	t.armSchedule()
}

// stopSchedule stops the timer for good; the broker is shutting down.
func (t *topic) stopSchedule() {
	t.lock()
	defer t.unlock()
	t.sched.closed = true
	if t.sched.timer != nil {
		t.sched.timer.Stop()
	}
}

// scheduledStats returns the count of scheduled entries and the earliest
// due time. mu is held.
func (t *topic) scheduledStats() (int, time.Time) {
	if len(t.sched.q) == 0 {
		return 0, time.Time{}
	}
	return len(t.sched.q), time.UnixMilli(t.sched.q[0].due)
}
