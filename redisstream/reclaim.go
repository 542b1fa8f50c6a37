package redisstream

import (
	"context"
	"encoding/json"
	"fmt"
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
type reclaimer struct {
	refs int // guarded by Backend.mu

	busy sync.Mutex
	mu   sync.Mutex
	next time.Time // when the next scan is due
	from string    // XAUTOCLAIM cursor; "" = start over
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

// dueBy makes the next scan due no later than t.
func (r *reclaimer) dueBy(t time.Time) {
	r.mu.Lock()
	if t.Before(r.next) {
		r.next = t
	}
	r.mu.Unlock()
}

func (r *reclaimer) scanned(cursor string, interval time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if cursor == "0-0" || cursor == "" {
		r.from = ""
		r.next = time.Now().Add(interval)
		return
	}
	r.from = cursor // more to scan: stay due
}

func (r *reclaimer) cursor() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.from == "" {
		return "0-0"
	}
	return r.from
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
