package redisstream

import (
	"container/heap"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

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
// earliest of them is woken (see waitRead), so a delay is honoured to
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
	rescanGap = 5 * time.Millisecond
	// wakeSlack is how much sooner than a blocked read's end a due time
	// must come for the read to be woken; a read ending sooner than this
	// is never registered.
	wakeSlack = 10 * time.Millisecond
)

// errWoken is the cause of a read's ctx when the reclaimer woke it.
var errWoken = errors.New("redisstream: read woken for a due reclaim")

// blockedRead is a read that blocks until end unless woken by wake.
type blockedRead struct {
	end  time.Time
	wake context.CancelCauseFunc
}

func (r *reclaimer) tryLock() bool { return r.busy.TryLock() }
func (r *reclaimer) unlock()       { r.busy.Unlock() }

func (r *reclaimer) due(now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return !now.Before(r.next)
}

// until returns how long until the next scan is due (0 if due), and
// whether it is due for a due time of a give-back rather than for the
// periodic scan.
func (r *reclaimer) until(now time.Time) (time.Duration, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return max(r.next.Sub(now), 0), r.nextIsDue
}

// dueAt records that an entry given back by this process becomes
// claimable at t: the next scan is due no later than t, and the reads
// blocked past it are woken, so that their subscriptions start the scan
// at t.
func (r *reclaimer) dueAt(t time.Time) {
	r.mu.Lock()
	if len(r.dues) < maxDues {
		heap.Push(&r.dues, t)
	} else if t.After(r.overflow) {
		r.overflow = t
	}
	if t.Before(r.next) {
		r.next, r.nextIsDue = t, true
	}
	woken := r.wakeBefore(t)
	r.mu.Unlock()
	for _, br := range woken {
		br.wake(errWoken)
	}
}

// wakeBefore unregisters and returns the reads blocked past t (with
// r.mu held).
func (r *reclaimer) wakeBefore(t time.Time) []*blockedRead {
	var woken []*blockedRead
	kept := r.reads[:0]
	for _, br := range r.reads {
		if br.end.Sub(t) > wakeSlack {
			woken = append(woken, br)
		} else {
			kept = append(kept, br)
		}
	}
	clear(r.reads[len(kept):])
	r.reads = kept
	return woken
}

// waitRead registers a read that blocks until end; wake ends it early
// when a due time comes before end. It returns nil, registering nothing,
// for a read that ends within wakeSlack: no due time can come much
// before its end.
func (r *reclaimer) waitRead(end time.Time, wake context.CancelCauseFunc) *blockedRead {
	if time.Until(end) <= wakeSlack {
		return nil
	}
	br := &blockedRead{end: end, wake: wake}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reads = append(r.reads, br)
	return br
}

// readDone unregisters a read that returned.
func (r *reclaimer) readDone(br *blockedRead) {
	if br == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
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
// with XAUTOCLAIM and reads their delivery counts. Entries deleted from the
// stream while pending are reported (XAUTOCLAIM drops them from the
// pending list); malformed ones are quarantined.
func (s *subscription) reclaim(ctx context.Context, limit int) ([]*backend.Message, error) {
	list, err := s.autoclaim(ctx, limit)
	if err != nil || len(list) == 0 {
		return nil, err
	}
	counts, err := s.deliveryCounts(ctx, list)
	if err != nil {
		return nil, err
	}
	msgs := make([]*backend.Message, 0, len(list))
	for i, c := range list {
		// A reclaimed entry was delivered before, so an unknown count is
		// at least 2; a known count is the attempt, also 1 for an entry
		// whose only delivery was released (see Release).
		attempt := counts[i]
		if attempt == 0 {
			attempt = 2
		}
		m := &backend.Message{}
		if err := decode(c.id, c.values, m); err != nil {
			s.quarantine(ctx, c.id, c.values, attempt, err)
			continue
		}
		m.AckID = &entryRef{id: c.id, count: counts[i]}
		m.Attempt = attempt
		msgs = append(msgs, m)
	}
	return msgs, nil
}

// claimed is an entry XAUTOCLAIM handed to this consumer.
type claimed struct {
	id     string
	values map[string]any
}

// autoclaim takes up to limit entries idle past the ack timeout
// (XAUTOCLAIM), reports the entries Redis found trimmed, and drops the
// claimed entries whose data is gone.
func (s *subscription) autoclaim(ctx context.Context, limit int) ([]claimed, error) {
	start := s.rc.cursor()
	var raw []any
	err := s.b.call(ctx, func(ctx context.Context) error {
		var err error
		var reply []any
		reply, err = autoclaimScript.Run(ctx, s.b.client, []string{s.keys.stream, s.keys.lease},
			s.cfg.Group, s.consumer, s.cfg.AckTimeout.Milliseconds(), start, limit).Slice()
		if err == nil && len(reply) == 2 {
			if lease, ok := reply[0].(int64); ok {
				s.noteLease(lease)
			}
			raw, _ = reply[1].([]any)
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
	for _, v := range entries {
		pair, ok := v.([]any)
		if !ok || len(pair) < 2 {
			continue
		}
		id, _ := pair[0].(string)
		if pair[1] == nil {
			gone = append(gone, id)
			continue
		}
		list = append(list, claimed{id: id, values: toValues(pair[1])})
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

// deliveryCounts reads the delivery count of each claimed entry, one
// XPENDING per entry in one round trip; 0 means unknown.
func (s *subscription) deliveryCounts(ctx context.Context, list []claimed) ([]int, error) {
	pipe := s.b.client.Pipeline()
	for _, c := range list {
		pipe.Do(ctx, "XPENDING", s.keys.stream, s.cfg.Group, c.id, c.id, 1)
	}
	counts := make([]int, len(list))
	var cmds []redis.Cmder
	err := s.b.call(ctx, func(ctx context.Context) error {
		var err error
		cmds, err = pipe.Exec(ctx)
		return err
	})
	if ctx.Err() != nil {
		// Claimed entries stay pending to this consumer and are reclaimed
		// after their lease.
		return nil, ctx.Err()
	}
	if err == nil || len(cmds) == len(list) {
		for i, c := range cmds {
			counts[i] = deliveryCount(c)
		}
	}
	return counts, nil
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

// deliveryCount reads the count out of a one-entry XPENDING reply; 0 when
// the reply does not give it.
func deliveryCount(c interface{ Err() error }) int {
	type slicer interface{ Slice() ([]any, error) }
	sc, ok := c.(slicer)
	if !ok {
		return 0
	}
	rows, err := sc.Slice()
	if err != nil || len(rows) == 0 {
		return 0
	}
	row, ok := rows[0].([]any)
	if !ok || len(row) < 4 {
		return 0
	}
	switch n := row[3].(type) {
	case int64:
		return int(n)
	case string:
		if v, err := strconv.Atoi(n); err == nil {
			return v
		}
	}
	return 0
}

// malformedCopy builds, with the one dead-letter builder, the dead-letter
// message for an entry that could not be decoded (or was trimmed before
// delivery: code CodeExpired): its payload is a JSON object of the entry's
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
		code = backend.CodeExpired
	}
	m := backend.Message{ID: "redis-" + id, Payload: payload}
	cp := backend.NewDeadLetter(&m, backend.DeadLetterInfo{Topic: topic, Group: group, Attempt: attempt, Code: code, Reason: cause.Error()})
	cp.Headers[backend.HeaderDeadLetterID] = id
	return cp
}
