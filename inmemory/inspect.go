package inmemory

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/eventbus-go/bus/backend"
)

var _ backend.Inspector = (*Backend)(nil)

// Topics implements backend.Inspector. Every figure is exact: the broker
// is in this process.
func (b *Backend) Topics(ctx context.Context) ([]backend.TopicInfo, error) {
	if err := b.inspectable(ctx, "topics"); err != nil {
		return nil, err
	}
	b.br.mu.RLock()
	ts := make([]*topic, 0, len(b.br.topics))
	for _, t := range b.br.topics {
		ts = append(ts, t)
	}
	b.br.mu.RUnlock()
	out := make([]backend.TopicInfo, 0, len(ts))
	for _, t := range ts {
		out = append(out, t.info())
	}
	slices.SortFunc(out, func(a, b backend.TopicInfo) int { return compareStrings(a.Name, b.Name) })
	return out, nil
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (t *topic) info() backend.TopicInfo {
	t.lock()
	defer t.unlock()
	ti := backend.TopicInfo{Name: t.name, Messages: backend.Figure(t.live.Load()), Bytes: backend.Figure(t.liveBytes.Load()), Published: backend.Figure(t.head)}
	n, next := t.scheduledStats()
	ti.Scheduled, ti.NextDue = backend.Figure(n), next
	m := t.mask()
	for off := t.base; off < t.head; off++ {
		if e := t.ring[off&m]; e != nil {
			ti.Oldest = time.Unix(0, e.published)
			break
		}
	}
	for off := t.head; off > t.base; off-- {
		if e := t.ring[(off-1)&m]; e != nil {
			ti.Newest = time.Unix(0, e.published)
			break
		}
	}
	return ti
}

// Groups implements backend.Inspector.
func (b *Backend) Groups(ctx context.Context, name string) ([]backend.GroupInfo, error) {
	if err := b.inspectable(ctx, "groups"); err != nil {
		return nil, err
	}
	t := b.br.lookup(name)
	if t == nil {
		return []backend.GroupInfo{}, nil
	}
	t.lock()
	defer t.unlock()
	out := make([]backend.GroupInfo, 0, len(t.glist))
	for _, g := range t.glist {
		out = append(out, g.info())
	}
	slices.SortFunc(out, func(a, b backend.GroupInfo) int { return compareStrings(a.Name, b.Name) })
	return out, nil
}

// info describes the group; the topic lock is held.
func (g *group) info() backend.GroupInfo {
	gi := backend.GroupInfo{Name: g.name, Consumers: backend.Figure(g.members)}
	pending := g.ready.len() + len(g.delayed)
	oldest := int64(-1)
	for _, q := range g.queues {
		for i := range q.recs.n {
			r := &q.recs.buf[(q.recs.head+i)&(len(q.recs.buf)-1)]
			for j := r.next; j < len(r.ls); j++ {
				if r.stale(&r.ls[j]) {
					continue
				}
				pending++
				if at := r.deadline - int64(q.timeout); oldest < 0 || at < oldest {
					oldest = at
				}
			}
		}
	}
	gi.Pending = backend.Figure(pending)
	if oldest >= 0 {
		gi.OldestPending = g.t.b.epoch.Add(time.Duration(oldest))
	}
	lag := 0
	t := g.t
	for off := max(g.cursor, t.base); off < t.head; off++ {
		if t.ring[off&t.mask()] != nil {
			lag++
		}
	}
	gi.Lag = backend.Figure(lag)
	return gi
}

// Peek implements backend.Inspector. The cursor is the log offset of the
// next message, in decimal.
func (b *Backend) Peek(ctx context.Context, name, cursor string, n int) ([]*backend.Message, string, error) {
	if err := b.inspectable(ctx, "peek"); err != nil {
		return nil, "", err
	}
	if n < 1 {
		return nil, "", fmt.Errorf("inmemory: peek %q: %w: n %d, want >= 1", name, ErrInvalidOption, n)
	}
	var from uint64
	if cursor != "" {
		v, err := strconv.ParseUint(cursor, 10, 64)
		if err != nil {
			return nil, "", fmt.Errorf("inmemory: peek %q: %w: cursor %q is not one Peek returned", name, ErrInvalidOption, cursor)
		}
		from = v
	}
	t := b.br.lookup(name)
	if t == nil {
		return nil, "", nil
	}
	t.lock()
	defer t.unlock()
	var out []*backend.Message
	off := max(from, t.base)
	for ; off < t.head && len(out) < n; off++ {
		e := t.ring[off&t.mask()]
		if e == nil {
			continue
		}
		out = append(out, &backend.Message{
			ID: e.id, Key: e.key(), Headers: maps.Clone(e.headers()), Payload: slices.Clone(e.payload),
			PublishedAt: time.Unix(0, e.published),
		})
	}
	next := ""
	if off < t.head {
		next = strconv.FormatUint(off, 10)
	}
	return out, next, nil
}

// Delete implements backend.Inspector. A message that some group has
// received and not settled yet is not deleted (it is skipped like an ID
// that is not found), so no delivery ever sees a deleted entry.
func (b *Backend) Delete(ctx context.Context, name string, ids []string) (int, error) {
	has := backend.HasID(ids)
	return b.deleteWhere(ctx, name, len(ids), func(e *entry) bool { return has(&backend.Message{ID: e.id}) })
}

// DeleteCopies removes the messages of topic name that equal one of msgs
// in ID and headers (backend.CopyDeleter), as Delete does.
func (b *Backend) DeleteCopies(ctx context.Context, name string, msgs []*backend.Message) (int, error) {
	same := backend.SameCopy(msgs)
	return b.deleteWhere(ctx, name, len(msgs), func(e *entry) bool {
		return same(&backend.Message{ID: e.id, Headers: e.headers()})
	})
}

// deleteWhere removes the retained entries of topic name that match and
// that no group holds in flight; n is how many were asked for.
func (b *Backend) deleteWhere(ctx context.Context, name string, n int, match func(*entry) bool) (int, error) {
	if err := b.inspectable(ctx, "delete"); err != nil {
		return 0, err
	}
	t := b.br.lookup(name)
	if t == nil || n == 0 {
		return 0, nil
	}
	t.lock()
	defer t.unlock()
	deleted := 0
	m := t.mask()
	for off := t.base; off < t.head; off++ {
		e := t.ring[off&m]
		if e == nil || !match(e) {
			continue
		}
		undelivered := int32(0)
		for _, g := range t.glist {
			if g.cursor <= off {
				undelivered++
			}
		}
		if len(t.glist) > 0 && e.refs != undelivered {
			continue // in flight for some group
		}
		e.release()
		e.refs = 0
		t.ring[off&m] = nil
		t.unlive(e)
		deleted++
	}
	if deleted > 0 {
		t.advance()
	}
	return deleted, nil
}

func (b *Backend) inspectable(ctx context.Context, op string) error {
	if b.closed.Load() {
		return errClosed(op, "")
	}
	return ctx.Err()
}
