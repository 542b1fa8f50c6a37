package inmemory

import (
	"fmt"
	"maps"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eventbus-go/bus/backend"
)

// entry is one published message in a topic log. Its fields are written
// once by Publish and then only read, except refs and the release of the
// message data, which happen under the topic lock.
type entry struct {
	off uint64
	id  string
	// meta holds the key and the headers; nil when the message has
	// neither, as most have: the entry stays small.
	meta      *entryMeta
	payload   []byte
	published int64 // Unix nanoseconds
	// refs counts the groups that have not settled the entry yet.
	refs int32
	// size is what the entry counts against MaxBacklogBytes.
	size int32
}

// entryMeta is the key and the headers of an entry that has either.
type entryMeta struct {
	key     string
	headers map[string]string
}

// key is e's key.
func (e *entry) key() string {
	if e.meta == nil {
		return ""
	}
	return e.meta.key
}

// headers is e's headers, nil when it has none.
func (e *entry) headers() map[string]string {
	if e.meta == nil {
		return nil
	}
	return e.meta.headers
}

// entryOverhead is what an entry counts against MaxBacklogBytes on top of
// its payload and headers: the entry, its log slot and a delivery.
const entryOverhead = 256

// release drops the references to the message data so the garbage
// collector can take it while the entry struct itself may still be held
// by a slab or a stale lease. It clears only what is set: every pointer
// cleared while the collector marks costs a write barrier.
func (e *entry) release() {
	e.id, e.payload = "", nil
	if e.meta != nil {
		e.meta = nil
	}
}

// topic is a retained log of entries plus its consumer groups. Every field
// is guarded by mu unless its comment says otherwise.
//
// The log is a ring of entry pointers covering the offsets [base, head).
// A slot is nil once its entry has been freed (settled by every group).
// base only moves past nil slots, or past entries that every group has
// already received when the window grows too large (see advance); such an
// entry lives on through its leases and redelivery queues.
//
// A publisher that finds mu held does not wait for it: it leaves its batch
// in the inbox, and whoever holds mu appends it to the log before letting
// go (lock and unlock drain the inbox; see offer). A parked publisher
// would be woken on the core of the Receive or Ack that held mu, and the
// core it ran on would sit idle until the scheduler moved one of them
// back: on a two-core machine that cost a third of end-to-end throughput.
// Every reader of the log takes mu through lock, so a batch in the inbox
// is appended before anyone can look for it: a Publish that returned is
// visible to every later Receive, Subscribe and inspection.
type topic struct {
	mu   sync.Mutex
	name string
	b    *broker

	ring       []*entry
	base, head uint64

	// live counts entries that are retained: not yet settled by every
	// group, or, while the topic has no group, held in the ring; the
	// inbox's entries count too. Both counters only grow under inMu (see
	// admit), so that a publisher that holds inMu sees them move only
	// down, and only shrink under mu.
	live      atomic.Int64
	liveBytes atomic.Int64
	// freed and freedBytes are what entries freed under mu take off live
	// and liveBytes when mu is let go (flushFreed): two atomic adds per
	// lock hold instead of two per freed entry, on counters the
	// publishers add to from the other core.
	freed      int64
	freedBytes int64

	groups map[string]*group
	glist  []*group
	// hasGroups is set once the topic has a group; groups are never
	// removed. Read without mu by offer.
	hasGroups atomic.Bool

	// spaceCh is closed (and reset) when live goes down enough for the
	// smallest batch a publisher waits to store (spaceNeed) under
	// BacklogWait.
	spaceCh        chan struct{}
	spaceNeed      int
	spaceNeedBytes int64

	// dropped counts entries dropped because the topic had no group and
	// its backlog was full.
	dropped uint64

	inMu sync.Mutex
	// inbox holds the batches offered while mu was held, in the order
	// they were admitted; guarded by inMu.
	inbox [][]entry
	// inboxFull is set while inbox is not empty.
	inboxFull atomic.Bool
	// spare is the drained inbox's backing array, reused by the next
	// drain; guarded by mu.
	spare [][]entry

	// sched holds the entries whose DeliverAt is still to come.
	sched schedule

	// dedup remembers the recently published IDs; guarded by inMu.
	dedup dedup

	// bound caps the topic while it has no group (BoundRetention).
	bound backend.RetentionBound
}

const minRing = 64

// keptRing is the ring size below which advance never shrinks a ring: a
// backlog that swings within a few Receives' worth of entries, as one
// whose consumers keep up does, keeps its ring (8 KiB) rather than
// moving its window to a smaller ring and back again.
const keptRing = 1024

func newTopic(b *broker, name string) *topic {
	t := &topic{name: name, b: b, ring: make([]*entry, minRing), groups: map[string]*group{}}
	t.dedup.window, t.dedup.max = max(int64(b.opts.DedupWindow), 0), b.opts.dedupMax()
	return t
}

// waitSpace returns the channel closed when the backlog has room for n
// more entries.
func (t *topic) waitSpace(n int, bytes int64) <-chan struct{} {
	if t.spaceCh == nil {
		t.spaceCh = make(chan struct{})
		t.spaceNeed, t.spaceNeedBytes = n, bytes
	}
	t.spaceNeed = min(t.spaceNeed, n)
	t.spaceNeedBytes = min(t.spaceNeedBytes, bytes)
	return t.spaceCh
}

// fits reports whether n more entries of bytes in total fit in the
// backlog limits.
func (t *topic) fits(n int, bytes int64) bool {
	return t.live.Load()+int64(n) <= int64(t.b.opts.MaxBacklog) && t.liveBytes.Load()+bytes <= t.b.opts.MaxBacklogBytes
}

func (t *topic) fullError() error {
	o := t.b.opts
	return fmt.Errorf("%w: %d unsettled entries of %d bytes, max %d entries and %d bytes", ErrBacklogFull, t.live.Load(), t.liveBytes.Load(), o.MaxBacklog, o.MaxBacklogBytes)
}

// yieldAhead is the share of a backlog limit (one part in yieldAhead)
// past which a publisher yields its processor after each Publish (see
// yieldIfAhead); past yieldEntries entries it yields whatever the limits,
// past yieldEntriesOneProc when the process runs on a single processor
// (GOMAXPROCS 1 when the broker is made): the groups then run only while
// the publisher yields, never alongside it, so a lead past about one
// Receive keeps none of them busier and only adds to what the collector
// marks.
const (
	yieldAhead          = 8
	yieldEntries        = 1024
	yieldEntriesOneProc = 256
)

// yieldIfAhead lets the consumers run when the publishers are ahead of
// them: when the topic has a group and its backlog is past an eighth of
// either limit, or past yieldEntries entries, the calling publisher
// yields its processor once (runtime.Gosched). The entries a publisher
// stores ahead of the consumers stay on the heap until every group
// settled them, and the collector marks them on each cycle: a lead of a
// few Receives keeps the consumers busy, a larger one only costs memory
// and collector work, whatever MaxBacklog allows. A publisher never blocks while the backlog has room,
// so it keeps its processor while the subscription goroutines it woke
// wait for one. Measured on two cores at GOGC=100, the yield raised the
// end-to-end rate by 10-12% and kept the backlog smaller (median latency
// at a million messages 22-27 ms instead of 29-33); with the collector
// off it changed nothing, and on one core it is a wash (BenchmarkMemE2E
// slower, bus bench faster). It costs a publisher that is ahead one trip
// through the scheduler per Publish call, and nothing while the
// consumers keep up. A topic without a group has no consumer to yield
// to.
func (t *topic) yieldIfAhead() {
	if !t.hasGroups.Load() {
		return
	}
	o := t.b.opts
	if t.live.Load() > int64(min(o.MaxBacklog/yieldAhead, t.b.aheadMax)) || t.liveBytes.Load() > o.MaxBacklogBytes/yieldAhead {
		t.b.yield()
	}
}

// lock takes mu and appends what the inbox holds.
func (t *topic) lock() {
	t.mu.Lock()
	t.drain()
}

// unlock lets go of mu. A batch offered while mu was held is appended
// first: by this call, or by whoever took mu in between.
func (t *topic) unlock() {
	for {
		t.drain()
		t.flushFreed()
		t.mu.Unlock()
		// A publisher that offered a batch after the drain above and
		// found mu held counts on this check (see offer).
		if !t.inboxFull.Load() || !t.mu.TryLock() {
			return
		}
	}
}

// drain appends the inbox's batches to the log; mu is held.
func (t *topic) drain() {
	if !t.inboxFull.Load() {
		return
	}
	t.inMu.Lock()
	batches := t.inbox
	t.inbox = t.spare
	t.inboxFull.Store(false)
	t.inMu.Unlock()
	for _, es := range batches {
		t.insert(es)
	}
	clear(batches)
	t.spare = batches[:0]
}

// admit counts a batch of n entries of bytes in total against the backlog
// limits. With limit, it admits the batch only if it fits, and reports
// whether it did; without, it always does (a topic without a group makes
// room by dropping its oldest entries).
func (t *topic) admit(n int, bytes int64, limit bool) bool {
	t.inMu.Lock()
	defer t.inMu.Unlock()
	return t.admitLocked(n, bytes, limit)
}

// admitBatch is admit for a batch of published entries: it first drops
// the entries whose ID the topic remembers from its dedup window, and
// records the IDs of the batch it admits. It returns the entries to
// store (possibly none) and whether the batch was admitted.
func (t *topic) admitBatch(es []entry, bytes int64, limit bool) ([]entry, bool) {
	t.inMu.Lock()
	defer t.inMu.Unlock()
	return t.admitBatchLocked(es, bytes, limit)
}

// admitBatchLocked is admitBatch with inMu held.
func (t *topic) admitBatchLocked(es []entry, bytes int64, limit bool) ([]entry, bool) {
	now := t.b.now()
	es, bytes = t.dedup.fresh(es, bytes, now)
	if len(es) == 0 {
		return es, true
	}
	if !t.admitLocked(len(es), bytes, limit) {
		return es, false
	}
	t.dedup.record(now)
	return es, true
}

// admitLocked is admit with inMu held.
func (t *topic) admitLocked(n int, bytes int64, limit bool) bool {
	if limit && !t.fits(n, bytes) {
		return false
	}
	t.live.Add(int64(n))
	t.liveBytes.Add(bytes)
	return true
}

// offer stores a batch without waiting for mu, which another goroutine
// holds: it admits the batch to the inbox if the topic has a group and the
// batch fits in the backlog. It reports false, storing nothing, when the
// caller must take mu and store the batch itself. A batch it accepted is
// appended by whoever holds mu before they let go of it, or by the caller
// when mu turns out to be free by now.
func (t *topic) offer(es []entry, bytes int64) bool {
	if !t.hasGroups.Load() {
		return false
	}
	t.inMu.Lock()
	es, ok := t.admitBatchLocked(es, bytes, true)
	if !ok {
		t.inMu.Unlock()
		return false
	}
	if len(es) == 0 {
		t.inMu.Unlock()
		return true
	}
	t.inbox = append(t.inbox, es)
	t.inboxFull.Store(true)
	t.inMu.Unlock()
	// inboxFull is set before mu is tried: if mu is held now, its holder
	// sees the flag after letting go (unlock) and drains.
	if t.mu.TryLock() {
		t.unlock()
	}
	return true
}

func (t *topic) mask() uint64 { return uint64(len(t.ring) - 1) }

// at returns the entry at off, or nil when it is freed or outside the log.
func (t *topic) at(off uint64) *entry {
	if off < t.base || off >= t.head {
		return nil
	}
	return t.ring[off&t.mask()]
}

// resize moves the window [base, head) into a ring of n slots (a power of
// two at least head-base). The old ring, emptied, goes back to ringPools.
func (t *topic) resize(n int) {
	r := getRing(n)
	m, om := uint64(n-1), t.mask()
	old := t.ring
	for off := t.base; off < t.head; off++ {
		r[off&m] = old[off&om]
		old[off&om] = nil
	}
	t.ring = r
	putRing(old)
}

// ringPools holds emptied rings by size (ringPools[i] those of 1<<i
// slots), so that a backlog that swings between nearly empty and a few
// thousand entries, growing and shrinking its ring each time, reuses the
// rings of the last swing instead of allocating new ones. A ring in a
// pool is freed by the garbage collector within two cycles when nothing
// takes it, so a ring shrunk after a spike gives its memory back.
var ringPools [32]sync.Pool

// getRing returns a ring of n slots (a power of two), every slot nil.
func getRing(n int) []*entry {
	if r, ok := ringPools[bits.TrailingZeros(uint(n))].Get().(*[]*entry); ok {
		return *r
	}
	return make([]*entry, n)
}

// putRing gives r, every slot nil, back to ringPools.
func putRing(r []*entry) {
	if i := bits.TrailingZeros(uint(len(r))); i < len(ringPools) {
		ringPools[i].Put(&r)
	}
}

// insert adds the admitted batch es to the log and hands one reference to
// each group.
func (t *topic) insert(es []entry) {
	need := int(t.head-t.base) + len(es)
	if need > len(t.ring) {
		n := len(t.ring)
		for n < need {
			n *= 2
		}
		t.resize(n)
	}
	refs := int32(len(t.glist))
	m := t.mask()
	for i := range es {
		e := &es[i]
		e.off = t.head
		e.refs = refs
		t.ring[t.head&m] = e
		t.head++
	}
	if len(t.glist) == 0 {
		// No group yet: keep the newest entries within the limits, drop
		// the oldest so publishing with no subscriber never blocks. The
		// counts go down when mu is let go (flushFreed), so what was
		// dropped so far is taken off here.
		for !t.fits(-int(t.freed), -t.freedBytes) && t.base < t.head {
			t.dropFront()
			t.dropped++
		}
		t.dropPastBound()
	}
	if len(t.glist) > 0 && t.head-t.base > 2*uint64(t.b.opts.MaxBacklog) {
		t.advance()
	}
	for _, g := range t.glist {
		g.notify()
	}
}

// dropFront drops the oldest entry of a topic that has no group.
func (t *topic) dropFront() {
	i := t.base & t.mask()
	if e := t.ring[i]; e != nil {
		e.release()
		t.ring[i] = nil
		t.unlive(e)
	}
	t.base++
}

// settle takes one group's reference off e and frees it when it was the
// last.
func (t *topic) settle(e *entry) {
	if t.settleAt(e) {
		t.advance()
	}
}

// settleAt is settle without moving base: it reports whether it freed the
// entry at base, after which the caller must call advance (once for a
// run of settles, as an Ack of many does).
func (t *topic) settleAt(e *entry) bool {
	e.refs--
	if e.refs > 0 {
		return false
	}
	e.release()
	t.unlive(e)
	if e.off >= t.base && e.off < t.head {
		t.ring[e.off&t.mask()] = nil
	}
	return e.off == t.base
}

// unlive takes the freed entry e off the backlog counts when mu is let
// go (see flushFreed); mu is held.
func (t *topic) unlive(e *entry) {
	t.freed++
	t.freedBytes += int64(e.size)
}

// flushFreed takes what was freed since the last flush off the backlog
// counts and wakes the publishers waiting for room once it is enough;
// mu is held. unlock calls it before letting go of mu, so whoever takes
// mu next, and a publisher that reads the counts without it, sees every
// entry freed before.
func (t *topic) flushFreed() {
	if t.freed == 0 {
		return
	}
	t.live.Add(-t.freed)
	t.liveBytes.Add(-t.freedBytes)
	t.freed, t.freedBytes = 0, 0
	if t.spaceCh != nil && t.fits(t.spaceNeed, t.spaceNeedBytes) {
		close(t.spaceCh)
		t.spaceCh = nil
	}
}

// advance moves base past freed slots. When the window is more than twice
// the backlog limit (an old entry is stuck unsettled while newer ones
// were settled), it also moves past entries every group has already
// received: they stay alive through their leases and queues, and only a
// group created later with StartOldest no longer sees them. This keeps the
// ring, and so memory, bounded by the backlog limit.
func (t *topic) advance() {
	m := t.mask()
	for t.base < t.head && t.ring[t.base&m] == nil {
		t.base++
	}
	if t.head-t.base > 2*uint64(t.b.opts.MaxBacklog) && len(t.glist) > 0 {
		minCursor := t.head
		for _, g := range t.glist {
			minCursor = min(minCursor, g.cursor)
		}
		for t.base < minCursor && t.head-t.base > uint64(t.b.opts.MaxBacklog) {
			t.ring[t.base&m] = nil
			t.base++
			for t.base < t.head && t.ring[t.base&m] == nil {
				t.base++
			}
		}
	}
	// Shrink with wide hysteresis (below a sixteenth, to a quarter), so a
	// backlog that swings between full and nearly empty does not
	// reallocate its ring on every swing; a ring of keptRing slots or
	// fewer is kept as it is.
	if n := len(t.ring); n > keptRing && int(t.head-t.base) < n/16 {
		for n > keptRing && int(t.head-t.base) < n/16 {
			n = max(keptRing, n/4)
		}
		t.resize(n)
	}
}

// addGroup creates group name positioned at from.
func (t *topic) addGroup(name string, from backend.StartFrom) *group {
	g := newGroup(t, name)
	first := len(t.glist) == 0
	switch from {
	case backend.StartOldest:
		g.cursor = t.base
		for off := t.base; off < t.head; off++ {
			if e := t.ring[off&t.mask()]; e != nil {
				e.refs++
			}
		}
	default:
		g.cursor = t.head
		if first {
			// Entries kept while the topic had no group belong to nobody.
			for t.base < t.head {
				t.dropFront()
			}
			if len(t.ring) > minRing {
				putRing(t.ring)
				t.ring = getRing(minRing)
			}
		}
	}
	t.groups[name] = g
	t.glist = append(t.glist, g)
	t.hasGroups.Store(true)
	return g
}

// headersSize is what headers count against MaxBacklogBytes.
func headersSize(headers map[string]string) int {
	size := 0
	for k, v := range headers {
		size += len(k) + len(v) + 32
	}
	return size
}

// copyEntries copies msgs into entries the topic can keep: the caller owns
// the messages, their header maps and payloads. The entries of the batch
// are a run carved from br's chunks of entries, and its payloads share
// one slab carved from br's chunks of payloads, each capped to its own
// length. It also returns what the batch counts against MaxBacklogBytes.
func (br *broker) copyEntries(msgs []*backend.Message) ([]entry, int64) {
	size := 0
	for _, m := range msgs {
		size += len(m.Payload)
	}
	payloads := br.payloads.Take(size)
	es := br.entries.Take(len(msgs))
	var now, total int64
	for i, m := range msgs {
		e := &es[i]
		e.id = m.ID
		size := entryOverhead + len(m.Payload) + len(m.ID) + len(m.Key)
		if m.Key != "" || len(m.Headers) > 0 {
			e.meta = &entryMeta{key: m.Key}
			if len(m.Headers) > 0 {
				e.meta.headers = maps.Clone(m.Headers)
				size += headersSize(m.Headers)
			}
		}
		e.size = int32(min(size, math.MaxInt32))
		total += int64(e.size)
		if m.Payload != nil {
			e.payload = payloads.Copy(m.Payload)
		}
		if m.PublishedAt.IsZero() {
			if now == 0 {
				now = time.Now().UnixNano()
			}
			e.published = now
		} else {
			e.published = m.PublishedAt.UnixNano()
		}
	}
	return es, total
}
