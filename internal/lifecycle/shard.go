package lifecycle

import (
	"hash/maphash"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// lines is events encoded as JSON Lines: buf holds them, and ends[i] is
// where event i's line (its newline included) ends in buf.
type lines struct {
	buf  []byte
	ends []int
}

// shard is a part of an Emitter's buffer: the lines of the events put
// there. The events of all shards together are bounded by the emitter's
// room (Config.Buffer), which a shard reserves a chunk at a time.
type shard struct {
	mu      sync.Mutex
	l       lines
	left    int    // events reserved from the room and not put yet
	closing bool   // set by Close: putEvent drops from then on
	done    bool   // its Sink was released: putEvent refuses from then on
	k       *known // what its lines leave out: its Sink's (nil: shared)

	// Owned by the emitter's goroutine.
	taken lines    // what the last take took
	idle  int      // takes in a row that found it empty
	_     [64]byte // keeps the shards' locks on cache lines of their own
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

// roomChunk is how many events a shard reserves from the room at once:
// one atomic operation on the shared count per chunk, not per event.
const roomChunk = 64

// shardsFor is how many shared shards a buffer of n events has: several
// when each still holds a few messages' worth.
func shardsFor(n int) int {
	const most = 8
	return max(1, min(most, n/(4*MaxPackEvents)))
}

// released is what putEvent returns for a shard of a released Sink.
const released = -1

// idleTakes is how many takes in a row must find a shard empty before it
// gives its buffers up.
const idleTakes = 64

// take moves the shard's lines to taken, gives the shard taken's old
// (emptied) buffers, and returns the room they and the unused reservation
// held to the emitter. A shard that stayed empty for idleTakes takes
// gives its buffers up: an idle subscription holds no memory.
func (sh *shard) take(e *Emitter) {
	empty := sh.taken
	empty.buf, empty.ends = empty.buf[:0], empty.ends[:0]
	sh.mu.Lock()
	sh.taken, sh.l = sh.l, empty
	if len(sh.taken.ends) > 0 {
		sh.idle = 0
	} else if sh.idle++; sh.idle == idleTakes {
		sh.taken, sh.l = lines{}, lines{}
	}
	back := sh.left + len(sh.taken.ends)
	sh.left = 0
	sh.mu.Unlock()
	e.free.Add(int64(back))
}

func (sh *shard) close() {
	sh.mu.Lock()
	sh.closing = true
	sh.mu.Unlock()
}

// reserve takes up to roomChunk events of room, and returns how many (0:
// the buffer is full). It wakes the emitter when the events buffered
// reach a batch.
func (e *Emitter) reserve() int {
	for {
		free := e.free.Load()
		if free <= 0 {
			return 0
		}
		n := min(free, roomChunk)
		if !e.free.CompareAndSwap(free, free-n) {
			continue
		}
		if used := int64(e.cfg.Buffer) - free + n; used >= int64(e.cfg.Batch) && used-n < int64(e.cfg.Batch) {
			signal(e.full)
		}
		return int(n)
	}
}

// Sink is an Emitter as one subscription's member sees it: it names the
// topic and the member of each event, and buffers the events in shards
// of its own, so that they are packed together and their lines leave out
// the topic, group and member, which their messages' headers give. Its
// Emit takes a pointer, which a caller's event on its stack may pass
// without moving to the heap. It is safe for concurrent use.
type Sink struct {
	em       *Emitter
	k        known
	shards   []*shard
	released atomic.Bool // set once every shard refuses puts

	made atomic.Uint32 // Stages made, to spread them over the shards

	pendMu  sync.Mutex
	pending []*Stage // the stages that got an event since the emitter's last visit
	spare   []*Stage // the list flushStages swaps in; guarded by the emitter's regMu
}

// Sink returns the Sink of the subscription member of group on topic;
// the emitter publishes from it until Release.
func (e *Emitter) Sink(topic, group, member string) *Sink {
	s := &Sink{em: e, k: known{topic: topic, group: group, member: member}, shards: make([]*shard, sinkShards(e.cfg.Buffer))}
	e.regMu.Lock()
	defer e.regMu.Unlock()
	for i := range s.shards {
		s.shards[i] = &shard{k: &s.k, closing: e.closed}
	}
	e.sinks = append(e.sinks, s)
	return s
}

// sinkShards is how many shards a Sink has: a shared one per core, at
// most as many as the emitter's own.
func sinkShards(buffer int) int { return min(shardsFor(buffer), runtime.GOMAXPROCS(0)) }

// Emit sets ev's Topic and Member and buffers it, stamped with the wall
// time of its Mono reading when its Time is zero, as Emitter.Emit does.
func (s *Sink) Emit(ev *Event) {
	ev.Topic, ev.Member = s.k.topic, s.k.member
	if !s.em.emitTo(pick(s.shards, s.em.seed, ev.MessageID), ev, &s.k) {
		s.em.emit(ev) // released: in the emitter's own shards
	}
}

// pick returns the shard of shards that the events about key go to.
func pick(shards []*shard, seed maphash.Seed, key string) *shard {
	if len(shards) == 1 {
		return shards[0]
	}
	return shards[maphash.String(seed, key)%uint64(len(shards))]
}

// Release tells the emitter that the subscription is done: it publishes
// what the Sink holds and then forgets it. An event emitted later still
// goes out, through the emitter's own shards.
func (s *Sink) Release() {
	for _, sh := range s.shards {
		sh.mu.Lock()
		sh.done = true
		sh.mu.Unlock()
	}
	s.released.Store(true)
	signal(s.em.wake)
}

// Emit buffers ev, or counts it as dropped when the buffer is full or the
// emitter is closing. It never blocks.
func (e *Emitter) Emit(ev Event) { e.emit(&ev) }

// emit encodes ev into one of the emitter's own shards.
func (e *Emitter) emit(ev *Event) { e.emitTo(pick(e.shards, e.seed, ev.MessageID), ev, nil) }

// emitTo stamps ev and encodes it, leaving out what k holds, into sh, or
// drops it when the room does not take it. It reports false, having done
// nothing, when sh's Sink was released.
func (e *Emitter) emitTo(sh *shard, ev *Event, k *known) bool {
	t := e.stamp(ev)
	before, dropped := sh.putEvent(e, ev, k)
	ev.Time = t
	if before == released {
		return false
	}
	e.counted(before, 1, dropped)
	return true
}

// counted counts the dropped of n events put into a shard that held
// before, and wakes the emitter when the shard was empty and got some.
func (e *Emitter) counted(before, n, dropped int) {
	if dropped > 0 {
		e.drop(int64(dropped))
	}
	if before == 0 && dropped < n {
		signal(e.wake)
	}
}

// stamp sets ev's Time from its Mono reading, when it has none, for its
// encoding, and returns the Time ev had: the caller puts it back once ev
// is encoded, because an event's maker may emit it again with a new Mono
// reading (package bus makes a received event into its succeeded one).
func (e *Emitter) stamp(ev *Event) time.Time {
	t := ev.Time
	if !t.IsZero() {
		return t
	}
	r := e.ref.Load()
	if ev.Mono-r.mono > refAge {
		r = newRef(time.Now())
		e.ref.Store(r)
	}
	ev.Time = r.wall.Add(time.Duration(ev.Mono - r.mono))
	return t
}

// drop counts n dropped events, and reports the first drop.
func (e *Emitter) drop(n int64) {
	if e.dropped.Add(n) == n && !e.closing() {
		e.reportDrop()
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

// stageMax is how many events a Stage holds before it hands them to its
// Sink; stageAge how old its oldest may get (by the events' own clock
// readings) before it does.
const (
	stageMax = 32
	stageAge = int64(linger)
)

// Stage is a worker's own buffer in front of its Sink, so that the
// worker takes the lock of a shared shard once per group of events
// instead of once per event (that lock moves between cores with every
// event, and costs more than encoding one). Its own lock stays in the
// cache of the worker's core: only the emitter takes it too, once per
// batch. It holds at most stageMax events, the oldest at most stageAge
// old when the next comes; the emitter hands over what every stage
// holds before each batch, so no event waits on a long handler; it
// visits only the stages that got an event since its last visit, so
// idle workers cost it nothing. It is safe for concurrent use, but made
// for one goroutine.
type Stage struct {
	sink  *Sink
	shard *shard

	mu sync.Mutex
	// l holds the staged events, stamped and encoded leaving out what the
	// sink's known holds (every event of the stage has its topic, group
	// and member), so that handing them over copies bytes; first is the
	// Mono reading of the oldest.
	l      lines
	first  int64
	listed bool // in the sink's pending list
	gone   bool // released: the emitter no longer comes for it
}

// Stage returns a Stage of the sink, spread over its shards. The
// emitter hands over what it holds until Release.
func (s *Sink) Stage() *Stage {
	i := s.made.Add(1)
	return &Stage{sink: s, shard: s.shards[int(i)%len(s.shards)], l: lines{ends: make([]int, 0, stageMax)}}
}

// Emit stages ev, as Sink.Emit would buffer it, and hands the stage over
// when it is full or its oldest event is older than stageAge.
func (st *Stage) Emit(ev *Event) {
	s := st.sink
	if ev.Group != "" && ev.Group != s.k.group {
		// Of another group than the subscription's: it goes as it is,
		// after what is staged (a staged line has no group of its own).
		st.Flush()
		s.Emit(ev)
		return
	}
	ev.Topic, ev.Member = s.k.topic, s.k.member
	t := s.em.stamp(ev)
	st.mu.Lock()
	if len(st.l.ends) == 0 {
		st.first = ev.Mono
	}
	st.l.put(ev, &s.k)
	ev.Time = t
	if len(st.l.ends) >= stageMax || ev.Mono == 0 || ev.Mono-st.first >= stageAge || st.gone {
		st.flushLocked()
	}
	list := len(st.l.ends) > 0 && !st.listed
	st.listed = st.listed || list
	st.mu.Unlock()
	if list {
		s.pendMu.Lock()
		s.pending = append(s.pending, st)
		s.pendMu.Unlock()
		signal(s.em.wake) // the emitter comes for it within linger
	}
}

// Pending reports whether the stage holds events.
func (st *Stage) Pending() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.l.ends) > 0
}

// Flush hands the staged events over to the sink's shard.
func (st *Stage) Flush() {
	st.mu.Lock()
	st.flushLocked()
	st.mu.Unlock()
}

// Release hands over what the stage holds. An Emit after Release hands
// its event over at once.
func (st *Stage) Release() {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.flushLocked()
	st.gone = true
}

// flushLocked copies the staged lines into the shard, under one lock,
// dropping what the room does not take; when the sink was released they
// go through the emitter's own shards instead. st.mu is held.
func (st *Stage) flushLocked() {
	n := len(st.l.ends)
	if n == 0 {
		return
	}
	e := st.sink.em
	before, dropped := st.shard.putLines(e, &st.l)
	if before == released {
		e.emitWhole(&st.l, &st.sink.k)
	} else {
		e.counted(before, n, dropped)
	}
	st.l.buf, st.l.ends = st.l.buf[:0], st.l.ends[:0]
}

// emitWhole puts the lines of l, which leave out what k holds, into one
// of the emitter's own shards, in order, with k's fields put back: the
// lines of a stage whose sink was released.
func (e *Emitter) emitWhole(l *lines, k *known) {
	sh := pick(e.shards, e.seed, k.member)
	var whole lines
	from := 0
	for _, end := range l.ends {
		whole.buf = appendKnown(whole.buf, l.buf[from:end], k)
		whole.ends = append(whole.ends, len(whole.buf))
		from = end
	}
	before, dropped := sh.putLines(e, &whole)
	e.counted(before, len(whole.ends), dropped)
}

// flushStages hands over what the stages that got an event since the
// last call hold. The caller holds the emitter's regMu.
func (s *Sink) flushStages() {
	s.pendMu.Lock()
	list := s.pending
	s.pending = s.spare[:0]
	s.pendMu.Unlock()
	for _, st := range list {
		st.mu.Lock()
		st.listed = false
		st.flushLocked()
		st.mu.Unlock()
	}
	clear(list)
	s.spare = list
}

// putEvent encodes ev into the shard, leaving out what k holds, when the
// room takes it, and returns how many events the shard held before
// (released when its Sink was released, and then it put nothing) and
// whether it dropped ev (1) or not (0).
func (sh *shard) putEvent(e *Emitter, ev *Event, k *known) (before, dropped int) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	put, before := sh.roomLocked(e, 1)
	if put == 1 {
		sh.l.put(ev, k)
	}
	return before, 1 - put
}

// putLines is putEvent for events already encoded (l): it copies as many
// of l's lines as the room takes.
func (sh *shard) putLines(e *Emitter, l *lines) (before, dropped int) {
	n := len(l.ends)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	put, before := sh.roomLocked(e, n)
	if put > 0 {
		base := len(sh.l.buf)
		sh.l.buf = append(sh.l.buf, l.buf[:l.ends[put-1]]...)
		for _, end := range l.ends[:put] {
			sh.l.ends = append(sh.l.ends, base+end)
		}
	}
	return before, n - put
}

// roomLocked takes room for up to n events in sh and returns how many it
// took, and how many events sh held: released, having taken none, when
// its Sink was released; none either while it is closing. sh.mu is held.
func (sh *shard) roomLocked(e *Emitter, n int) (put, before int) {
	if sh.done {
		return 0, released
	}
	if sh.closing {
		return 0, len(sh.l.ends)
	}
	for sh.left < n {
		r := e.reserve()
		if r == 0 {
			break
		}
		sh.left += r
	}
	put = min(n, sh.left)
	sh.left -= put
	return put, len(sh.l.ends)
}

// put appends ev's line, leaving out what k holds.
func (l *lines) put(ev *Event, k *known) {
	l.buf = append(appendEvent(l.buf, ev, k), '\n')
	l.ends = append(l.ends, len(l.buf))
}
