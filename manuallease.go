package bus

import "time"

// manualLeases holds the AckManual deliveries whose handler returned
// unsettled, ordered by the end of their lease, and expires each when its
// lease ends: the slot is freed and the backend redelivers the message.
// One timer per subscription, set for the earliest lease, does the job of
// a timer per message. A delivery leaves the heap when it is settled (at
// once, so a settled delivery is never held until its lease would have
// ended), when its lease ends, or when Close gives it up. It is guarded by
// its subscription's mu (the methods named Locked need it held).
type manualLeases struct {
	s       *consumer
	heap    []leaseEntry
	timer   *time.Timer // fires at timerAt; nil until the first lease
	timerAt int64       // monoNow clock; 0 when the timer is not set
	stopped bool
}

// leaseEntry is a delivery waiting in manualLeases; its index is kept in
// the delivery's deliveryExt.leaseIdx.
type leaseEntry struct {
	end int64 // monoNow clock
	d   *record
	x   *deliveryExt
}

// addLocked queues d, whose lease ends at end; x is d's ext. It reports
// false, and queues nothing, once drain was called.
func (m *manualLeases) addLocked(d *record, x *deliveryExt, end int64) bool {
	if m.stopped {
		return false
	}
	x.leaseIdx = len(m.heap) + 1
	m.heap = append(m.heap, leaseEntry{end: end, d: d, x: x})
	m.up(len(m.heap) - 1)
	m.armLocked()
	return true
}

// moveLocked changes the end of a queued delivery's lease.
func (m *manualLeases) moveLocked(x *deliveryExt, end int64) {
	if x.leaseIdx == 0 {
		return
	}
	i := x.leaseIdx - 1
	m.heap[i].end = end
	if !m.up(i) {
		m.down(i)
	}
	m.armLocked()
}

// removeLocked takes a delivery out of the heap, if it is queued.
func (m *manualLeases) removeLocked(x *deliveryExt) {
	if x.leaseIdx == 0 {
		return
	}
	m.removeAt(x.leaseIdx - 1)
}

func (m *manualLeases) removeAt(i int) {
	last := len(m.heap) - 1
	if i != last {
		m.swap(i, last)
	}
	m.heap[last].x.leaseIdx = 0
	m.heap[last] = leaseEntry{}
	m.heap = m.heap[:last]
	if i != last {
		if !m.up(i) {
			m.down(i)
		}
	}
	if len(m.heap) == 0 && cap(m.heap) > 1024 {
		m.heap = nil // a burst of unsettled deliveries is over
	}
}

// fire expires the leases that have ended and sets the timer for the next.
func (m *manualLeases) fire() {
	now := monoNow()
	var due []*record
	m.s.mu.Lock()
	m.timerAt = 0
	for len(m.heap) > 0 && m.heap[0].end <= now {
		due = append(due, m.heap[0].d)
		m.removeAt(0)
	}
	if !m.stopped {
		m.armLocked()
	}
	m.s.mu.Unlock()
	for _, d := range due {
		d.expire()
	}
}

// armLocked sets the timer for the earliest lease when it is not set for
// it already.
func (m *manualLeases) armLocked() {
	if len(m.heap) == 0 {
		return
	}
	end := m.heap[0].end
	if m.timerAt != 0 && m.timerAt <= end {
		return // fires no later than needed; fire sets it again
	}
	m.timerAt = end
	wait := time.Duration(end - monoNow())
	if m.timer == nil {
		m.timer = time.AfterFunc(wait, m.fire)
	} else {
		m.timer.Reset(wait)
	}
}

// drain empties the heap and stops the timer for good; it returns the
// deliveries that were waiting.
func (m *manualLeases) drain() []*record {
	m.s.mu.Lock()
	defer m.s.mu.Unlock()
	m.stopped = true
	if m.timer != nil {
		m.timer.Stop()
	}
	ds := make([]*record, 0, len(m.heap))
	for _, e := range m.heap {
		e.x.leaseIdx = 0
		ds = append(ds, e.d)
	}
	m.heap = nil
	return ds
}

func (m *manualLeases) swap(i, j int) {
	h := m.heap
	h[i], h[j] = h[j], h[i]
	h[i].x.leaseIdx = i + 1
	h[j].x.leaseIdx = j + 1
}

// up moves entry i towards the root and reports whether it moved.
func (m *manualLeases) up(i int) bool {
	moved := false
	for i > 0 {
		p := (i - 1) / 2
		if m.heap[p].end <= m.heap[i].end {
			break
		}
		m.swap(i, p)
		i = p
		moved = true
	}
	return moved
}

func (m *manualLeases) down(i int) {
	n := len(m.heap)
	for {
		c := 2*i + 1
		if c >= n {
			return
		}
		if r := c + 1; r < n && m.heap[r].end < m.heap[c].end {
			c = r
		}
		if m.heap[i].end <= m.heap[c].end {
			return
		}
		m.swap(i, c)
		i = c
	}
}
