package lifecycle

import (
	"hash/maphash"
	"sync"
	"time"
)

// lines is events encoded as JSON Lines: buf holds them, and ends[i] is
// where event i's line (its newline included) ends in buf.
type lines struct {
	buf  []byte
	ends []int
}

// shard is a part of an Emitter's buffer: the lines of the events Emit
// put there, at most cap(ends) of them.
type shard struct {
	mu      sync.Mutex
	l       lines
	size    int      // cap(l.ends); set before the shard is shared
	closing bool     // set by Close: Emit drops from then on
	_       [64]byte // keeps the shards' locks on cache lines of their own
}

// clockRef is a wall time and its monotonic reading (see Event.Mono), to
// convert readings by. The emitter renews it at each take, and Emit when
// it is older than refAge.
type clockRef struct {
	wall time.Time
	mono int64
}

func newRef(now time.Time) *clockRef { return &clockRef{wall: now, mono: int64(now.Sub(Epoch))} }

const refAge = int64(time.Second)

// lineMax is the room an event's line has on the stack of Emit; a longer
// one (a long error) is encoded on the heap.
const lineMax = 512

// shardsFor is how many shards a buffer of n events has: several when
// each still holds a few messages' worth.
func shardsFor(n int) int {
	const most = 8
	return max(1, min(most, n/(4*MaxPackEvents)))
}

func (sh *shard) init(size int) {
	sh.size = size
	sh.l.ends = make([]int, 0, size)
}

// put appends line to the shard, and returns how many events it holds
// then, or 0 when it was dropped (the shard is full or closing).
func (sh *shard) put(line []byte) int {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	n := len(sh.l.ends)
	if n == cap(sh.l.ends) || sh.closing {
		return 0
	}
	sh.l.buf = append(sh.l.buf, line...)
	sh.l.ends = append(sh.l.ends, len(sh.l.buf))
	return n + 1
}

// swap returns the shard's lines and keeps empty's (emptied) instead.
func (sh *shard) swap(empty lines) lines {
	empty.buf, empty.ends = empty.buf[:0], empty.ends[:0]
	if cap(empty.ends) == 0 {
		empty.ends = make([]int, 0, sh.size)
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	out := sh.l
	sh.l = empty
	return out
}

func (sh *shard) close() {
	sh.mu.Lock()
	sh.closing = true
	sh.mu.Unlock()
}

// Emit buffers ev, or counts it as dropped when the buffer is full or the
// emitter is closing. It never blocks.
func (e *Emitter) Emit(ev Event) { e.emit(&ev, nil) }

// Sink is an Emitter as one subscription sees it: it names the topic and
// the member of each event. Its Emit takes a pointer, which a caller's
// event on its stack may pass without moving to the heap. It is safe for
// concurrent use.
type Sink struct {
	em  *Emitter
	enc known
}

// Sink returns the Sink of the subscription member of group on topic.
func (e *Emitter) Sink(topic, group, member string) *Sink {
	return &Sink{em: e, enc: known{topic: mkStr(topic), group: mkStr(group), member: mkStr(member)}}
}

// Emit sets ev's Topic and Member (and its Time, from its Mono reading)
// and buffers it, as Emitter.Emit does.
func (s *Sink) Emit(ev *Event) {
	ev.Topic, ev.Member = s.enc.topic.s, s.enc.member.s
	s.em.emit(ev, &s.enc)
}

// emit encodes ev, with the encodings of k, and buffers it.
func (e *Emitter) emit(ev *Event, k *known) {
	if ev.Time.IsZero() {
		r := e.ref.Load()
		if ev.Mono-r.mono > refAge {
			r = newRef(time.Now())
			e.ref.Store(r)
		}
		ev.Time = r.wall.Add(time.Duration(ev.Mono - r.mono))
	}
	var room [lineMax]byte
	line := append(appendEvent(room[:0], ev, k), '\n')
	sh := &e.shards[0]
	if len(e.shards) > 1 {
		sh = &e.shards[maphash.String(e.seed, ev.MessageID)%uint64(len(e.shards))]
	}
	switch sh.put(line) {
	case 0:
		if e.dropped.Add(1) == 1 && !e.closing() {
			e.reportDrop()
		}
	case 1:
		signal(e.wake)
	case e.fullAt:
		signal(e.full)
	}
}

// closing reports whether Close was called.
func (e *Emitter) closing() bool {
	select {
	case <-e.stop:
		return true
	default:
		return false
	}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
