package inmemory

// fifo is a growable ring-buffer queue. The zero value is empty and ready
// to use. It is not safe for concurrent use.
type fifo[T any] struct {
	buf  []T
	head int
	n    int
}

// fifoKeep is the capacity below which a fifo never shrinks.
const fifoKeep = 4096

func (q *fifo[T]) len() int { return q.n }

func (q *fifo[T]) push(v T) {
	if q.n == len(q.buf) {
		q.resize(max(16, 2*len(q.buf)))
	}
	q.buf[(q.head+q.n)&(len(q.buf)-1)] = v
	q.n++
}

// front returns the oldest element; the queue must not be empty.
func (q *fifo[T]) front() *T { return &q.buf[q.head] }

// pop removes the oldest element; the queue must not be empty.
func (q *fifo[T]) pop() T {
	v := q.buf[q.head]
	var zero T
	q.buf[q.head] = zero
	q.head = (q.head + 1) & (len(q.buf) - 1)
	q.n--
	// Shrink lazily so a queue that swings between full and empty does
	// not copy itself on every swing: a lease queue swings by the acks a
	// subscription batches on top of what it has in flight.
	if len(q.buf) > fifoKeep && q.n < len(q.buf)/8 {
		q.resize(len(q.buf) / 2)
	}
	return v
}

func (q *fifo[T]) resize(n int) {
	b := make([]T, n)
	for i := range q.n {
		b[i] = q.buf[(q.head+i)&(len(q.buf)-1)]
	}
	q.buf, q.head = b, 0
}

// delayed is a nacked entry waiting for its redelivery time.
type delayed struct {
	due     int64 // broker clock
	seq     uint64
	e       *entry
	attempt int32
	chain   *leaseChain
}

// delayHeap is a min-heap of delayed entries ordered by due time, then by
// nack order. It avoids container/heap so that pushing does not box.
type delayHeap []delayed

func (h delayHeap) less(i, j int) bool {
	if h[i].due != h[j].due {
		return h[i].due < h[j].due
	}
	return h[i].seq < h[j].seq
}

func (h *delayHeap) push(d delayed) {
	*h = append(*h, d)
	s := *h
	i := len(s) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !s.less(i, p) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *delayHeap) pop() delayed {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s[last] = delayed{}
	s = s[:last]
	i := 0
	for {
		l := 2*i + 1
		if l >= len(s) {
			break
		}
		c := l
		if r := l + 1; r < len(s) && s.less(r, l) {
			c = r
		}
		if !s.less(c, i) {
			break
		}
		s[i], s[c] = s[c], s[i]
		i = c
	}
	if cap(s) > 64 && len(s) < cap(s)/4 {
		s = append(delayHeap(nil), s...)
	}
	*h = s
	return top
}
