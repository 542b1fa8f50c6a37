package redisstream

import (
	"container/heap"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/observer"
)

type reclaimKey struct{ topic, group string }

// reclaimer is shared by the subscriptions of one stream and group in a
// Backend, so only one XAUTOCLAIM scan runs for them at a time. The scan is
// demand driven: the subscription that finds it due (and wins the lock)
// claims at most its own free capacity.
//
// A scan is due every reclaimInterval, which finds the entries whose
// lease ran out and those another process gave back, and when an entry
// this process gave back with a delay becomes claimable: the reclaimer
// keeps the due times of its own give-backs, and a read blocked past the
// earliest of them is woken then (see dueAt), so a delay is honoured to
// a few milliseconds on every attempt instead of at the next periodic
// scan.
type reclaimer struct {
	refs int // guarded by Backend.mu

	busy sync.Mutex
	mu   sync.Mutex
	next time.Time // when the next scan is due
	// nextIsDue: next is a due time in dues, not the periodic scan.
	nextIsDue bool
	from      string // XAUTOCLAIM cursor; "" = start over
	// pass is when the scan pass in progress started from the head of
	// the pending list: the due times up to it are served when the pass
	// ends.
	pass time.Time
	// dues holds the due times of the entries given back with a delay,
	// not yet served, earliest first; at most maxDues of them. Past
	// that, scans run every overflowPoll until overflow.
	dues     dueHeap
	overflow time.Time
	// reads are the blocked reads of the subscriptions sharing the
	// reclaimer.
	reads []*blockedRead
}

// Bounds of the due-time tracking.
const (
	// maxDues bounds the due times a reclaimer keeps.
	maxDues = 1 << 16
	// overflowPoll is the scan period while due times were dropped.
	overflowPoll = 50 * time.Millisecond
	// rescanGap is the least time between the end of a pass and a pass
	// for a due time, which bounds the scans a stream of give-backs with
	// scattered due times causes (the first due time after a pass waits up
	// to this long).
	rescanGap = 2 * time.Millisecond
)

// errWoken is the cause of a read's ctx when the reclaimer woke it.
var errWoken = errors.New("redisstream: read woken for a due reclaim")

// blockedRead is a read that blocks until end unless woken: wake ends
// its ctx. A due time before end arms timer to wake it then (at).
type blockedRead struct {
	end   time.Time
	wake  context.CancelCauseFunc
	at    time.Time
	timer *time.Timer
}

// wakeAt arms br to be woken at t, unless it ends by then or is armed
// for earlier (with the reclaimer's mu held).
func (br *blockedRead) wakeAt(t time.Time) {
	if !t.Before(br.end) || br.timer != nil && !t.Before(br.at) {
		return
	}
	br.at = t
	if br.timer == nil {
		br.timer = time.AfterFunc(time.Until(t), func() { br.wake(errWoken) })
		return
	}
	br.timer.Reset(time.Until(t))
}

func (r *reclaimer) tryLock() bool { return r.busy.TryLock() }
func (r *reclaimer) unlock()       { r.busy.Unlock() }

func (r *reclaimer) due(now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return !now.Before(r.next)
}

// until returns how long until the next scan is due (0 if due).
func (r *reclaimer) until(now time.Time) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return max(r.next.Sub(now), 0)
}

// dueAt records that an entry given back by this process becomes
// claimable at t: the next scan is due no later than t, and the reads
// blocked past it are woken then, so that their subscriptions start the
// scan at t. Redis ends a BLOCK only as often as its server cron runs
// (every 100ms at the default hz 10) when nothing else wakes it, so a
// read is not left to end by its BLOCK.
func (r *reclaimer) dueAt(t time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.dues) < maxDues {
		heap.Push(&r.dues, t)
	} else if t.After(r.overflow) {
		r.overflow = t
	}
	if t.Before(r.next) {
		r.next, r.nextIsDue = t, true
	}
	for _, br := range r.reads {
		br.wakeAt(t)
	}
}

// waitRead registers a read that blocks until end; wake ends it early,
// when a due time comes before end (see dueAt).
func (r *reclaimer) waitRead(end time.Time, wake context.CancelCauseFunc) *blockedRead {
	br := &blockedRead{end: end, wake: wake}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.nextIsDue && r.next.After(time.Now()) {
		// A scan due already is run by the next Receive, or is being
		// run by another subscription.
		br.wakeAt(r.next)
	}
	r.reads = append(r.reads, br)
	return br
}

// readDone unregisters a read that returned.
func (r *reclaimer) readDone(br *blockedRead) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if br.timer != nil {
		br.timer.Stop()
	}
	if i := slices.Index(r.reads, br); i >= 0 {
		r.reads = slices.Delete(r.reads, i, i+1)
	}
}

// scanned records the end of one XAUTOCLAIM call. When the call ended a
// pass over the pending list (cursor 0-0), the due times up to the
// pass's start are served (their entries were claimable when the pass
// reached them) and the next scan is due at the earliest due time left,
// or after interval, whichever comes first; otherwise the pass goes on
// at once.
func (r *reclaimer) scanned(cursor string, interval time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if cursor != "0-0" && cursor != "" {
		r.from = cursor // more to scan: stay due
		return
	}
	r.from = ""
	for len(r.dues) > 0 && !r.dues[0].After(r.pass) {
		heap.Pop(&r.dues)
	}
	now := time.Now()
	if now.Before(r.overflow) {
		interval = min(interval, overflowPoll)
	}
	r.next, r.nextIsDue = now.Add(interval), false
	if len(r.dues) > 0 {
		if t := maxTime(r.dues[0], now.Add(rescanGap)); t.Before(r.next) {
			r.next, r.nextIsDue = t, true
		}
	}
}

// cursor returns where the next XAUTOCLAIM starts; a pass that starts
// from the head of the pending list is timed.
func (r *reclaimer) cursor() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.from == "" {
		r.pass = time.Now()
		return "0-0"
	}
	return r.from
}

// dueHeap is a min-heap of due times (container/heap).
type dueHeap []time.Time

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].Before(h[j]) }
func (h dueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)        { *h = append(*h, x.(time.Time)) }
func (h *dueHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	*h = old[:len(old)-1]
	return t
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// reclaimInterval is how often a stream and group is scanned for expired
// leases: a quarter of the ack timeout, between 10ms and 1s.
func reclaimInterval(ackTimeout time.Duration) time.Duration {
	return min(max(ackTimeout/4, 10*time.Millisecond), time.Second)
}

// reclaim claims up to max entries idle for longer than the ack timeout
// with XAUTOCLAIM, with their delivery counts. Entries deleted from the
// stream while pending are reported (XAUTOCLAIM drops them from the
// pending list); malformed ones are quarantined.
func (s *subscription) reclaim(ctx context.Context, limit int) ([]*backend.Message, error) {
	list, err := s.autoclaim(ctx, limit)
	if err != nil || len(list) == 0 {
		return nil, err
	}
	msgs := make([]*backend.Message, 0, len(list))
	for _, c := range list {
		s.noteHanded(c.id)
		// A reclaimed entry was delivered before, so an unknown count is
		// at least 2; a known count is the attempt, also 1 for an entry
		// whose only delivery was released (see Release).
		attempt := c.count
		if attempt == 0 {
			attempt = 2
		}
		m := &backend.Message{}
		if err := decode(c.id, c.values, m); err != nil {
			s.quarantine(ctx, c.id, c.values, attempt, err)
			continue
		}
		m.AckID = &entryRef{id: c.id, count: c.count}
		m.Attempt = attempt
		msgs = append(msgs, m)
	}
	return msgs, nil
}

// claimed is an entry XAUTOCLAIM handed to this consumer, with its
// delivery count (0: unknown).
type claimed struct {
	id     string
	values map[string]any
	count  int
}

// autoclaim takes up to limit entries idle past the ack timeout
// (autoclaimScript), reports the entries Redis found trimmed, and drops
// the claimed entries whose data is gone.
func (s *subscription) autoclaim(ctx context.Context, limit int) ([]claimed, error) {
	start := s.rc.cursor()
	var raw, counts []any
	err := s.b.call(ctx, func(ctx context.Context) error {
		var err error
		var reply []any
		reply, err = autoclaimScript.Run(ctx, s.b.client, []string{s.keys.stream, s.keys.lease, s.keys.hold, s.keys.held},
			s.cfg.Group, s.consumer, s.cfg.AckTimeout.Milliseconds(), start, limit).Slice()
		if err == nil && len(reply) == 3 {
			if lease, ok := reply[0].(int64); ok {
				s.noteLease(lease)
			}
			raw, _ = reply[1].([]any)
			counts, _ = reply[2].([]any)
		}
		return err
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if isNoGroup(err) {
			return nil, s.recoverGroup(ctx, err)
		}
		return nil, receiveErr(s.errf("reclaim", err))
	}
	if len(raw) < 2 {
		return nil, s.errf("reclaim", fmt.Errorf("unexpected XAUTOCLAIM reply of %d elements", len(raw)))
	}
	cursor, _ := raw[0].(string)
	s.rc.scanned(cursor, reclaimInterval(s.cfg.AckTimeout))
	if len(raw) > 2 {
		s.reportTrimmed(raw[2])
	}
	entries, _ := raw[1].([]any)
	list := make([]claimed, 0, len(entries))
	var gone []string
	for i, v := range entries {
		pair, ok := v.([]any)
		if !ok || len(pair) < 2 {
			continue
		}
		id, _ := pair[0].(string)
		if pair[1] == nil {
			gone = append(gone, id)
			continue
		}
		c := claimed{id: id, values: toValues(pair[1])}
		if i < len(counts) {
			if n, ok := counts[i].(int64); ok {
				c.count = int(n)
			}
		}
		list = append(list, c)
	}
	s.dropTrimmed(ctx, gone)
	return list, nil
}

// reportTrimmed reports the pending entries XAUTOCLAIM found deleted from
// the stream (Redis 7 has already removed them from the pending list).
func (s *subscription) reportTrimmed(v any) {
	d, ok := v.([]any)
	if !ok {
		return
	}
	var deleted []string
	for _, v := range d {
		if id, ok := v.(string); ok {
			deleted = append(deleted, id)
		}
	}
	if len(deleted) == 0 {
		return
	}
	// Reported before counted: whoever sees the count sees the event.
	s.observe(observer.ScopeReclaim, deleted[0], 0, s.errf("reclaim", fmt.Errorf(
		"%d pending entries were trimmed or deleted from the stream before they were settled (first %s); they are lost", len(deleted), deleted[0])))
	s.b.stats.trimmed.Add(int64(len(deleted)))
}

// toValues converts a field list (RESP2 flat array) or map (RESP3) into a
// field map.
func toValues(v any) map[string]any {
	switch t := v.(type) {
	case map[any]any:
		m := make(map[string]any, len(t))
		for k, val := range t {
			ks, _ := k.(string)
			m[ks] = val
		}
		return m
	case map[string]any:
		return t
	case []any:
		m := make(map[string]any, len(t)/2)
		for i := 0; i+1 < len(t); i += 2 {
			ks, _ := t[i].(string)
			m[ks] = t[i+1]
		}
		return m
	default:
		return map[string]any{}
	}
}

// malformedCopy builds, with the one dead-letter builder, the dead-letter
// message for an entry that could not be decoded (or was trimmed before
// delivery: code CodeTrimmed): its payload is a JSON object of the entry's
// raw fields, which the dead-letter topic keeps for inspection; the reason
// names the entry and the problem only.
func malformedCopy(id string, values map[string]any, topic, group string, attempt int, cause error) *backend.Message {
	raw := make(map[string]string, len(values))
	for k, v := range values {
		raw[k] = fmt.Sprint(v)
	}
	payload, _ := json.Marshal(raw)
	code := backend.CodeMalformed
	if len(values) == 0 {
		code = backend.CodeTrimmed
	}
	m := backend.Message{ID: "redis-" + id, Payload: payload}
	cp := backend.NewDeadLetter(&m, backend.DeadLetterInfo{Topic: topic, Group: group, Attempt: attempt, Code: code, Reason: cause.Error()})
	cp.Headers[backend.HeaderDeadLetterID] = id
	return cp
}
