package nats

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/observer"
)

// Promotion. Every Backend with a subscription on a topic runs a promoter
// of the topic (startPromoter), and one of them, across every process,
// promotes: the one that holds the topic's promoter lock, a group lock
// (LockGroup) of the reserved group promoterGroup, renewed while it
// leads and released when its last subscription on the topic closes.
// When the leader dies its lock runs out after promoterTTL and another
// member's promoter takes over; a message due while no member of the
// topic ran is promoted when the next one starts: held, never lost.
//
// The leader reads the topic's schedules with an ordered consumer that
// delivers only their headers (the due time is the bus's
// backend.HeaderDeliverAt), keeps their due times and stream sequences
// in a heap, and when the first is due (by its own clock: never early)
// it reads each due schedule by sequence, publishes a copy on the
// topic's subject, in due order and publish order among those due at the
// same time, and deletes the schedule once the copy is stored. The copy
// keeps the schedule's headers and payload as stored, carries the
// message ID in hdrID and its publish time in hdrPublished, and has the
// Nats-Msg-Id of its schedule with "#due-<schedule sequence>" appended:
// the stream never takes it for a duplicate of the schedule or of
// another message, and drops a second copy of the same schedule (a
// leader that died between storing the copy and deleting the schedule,
// two leaders for a moment) within its duplicates window. Past the
// window a second copy is possible: promotion is at-least-once, as
// delivery is.

// promoterGroup is the group of the promoter's lock. A group cannot
// contain "~", so it is no group's.
const promoterGroup = "~promoter"

const (
	// promoterTTL is how long a promoter's lock lasts unrenewed: how
	// long promotion waits when its leader dies.
	promoterTTL = 3 * time.Second
	// promoteBatch bounds the schedules one round promotes: the leader
	// renews its lock between rounds.
	promoteBatch = 256
	// promoteRetry is the pause before a schedule whose promotion failed
	// is tried again.
	promoteRetry = 100 * time.Millisecond
	// promoteLead is how long before its DeliverAt a schedule is
	// promoted: about what a promotion takes (reading the schedule,
	// storing the copy) and the member's fetch, so that the copy reaches
	// the member by its DeliverAt. The member holds a copy that arrives
	// early in its slot until DeliverAt (the subscription's early deliveries,
	// which also cover clocks apart), so the lead costs a slot for at
	// most that long and a message is never handled early.
	promoteLead = 20 * time.Millisecond
	// unlockWait bounds the release of the lock when a promoter stops.
	unlockWait = 100 * time.Millisecond
)

// promoter runs the promotion of one topic for the Backend's
// subscriptions on it.
type promoter struct {
	b     *Backend
	topic string
	// obs is the observer of the subscription that started the
	// promoter (the bus gives every subscription the same one).
	obs    observer.Observer
	refs   int // subscriptions on the topic; under b.promoMu
	cancel context.CancelFunc
	// leading is set while the promoter holds the lock and reads the
	// schedules.
	leading atomic.Bool
}

// startPromoter counts a subscription on topic and starts the topic's
// promoter with the first, which reports its failures to obs.
func (b *Backend) startPromoter(topic string, obs observer.Observer) {
	if !b.caps.Scheduling {
		return
	}
	b.promoMu.Lock()
	defer b.promoMu.Unlock()
	if b.closed.Load() {
		return
	}
	p := b.promoters[topic]
	if p == nil {
		ctx, cancel := context.WithCancel(context.Background())
		p = &promoter{b: b, topic: topic, obs: obs, cancel: cancel}
		b.promoters[topic] = p
		b.promoWG.Add(1)
		go func() {
			defer b.promoWG.Done()
			p.run(ctx)
		}()
	}
	p.refs++
}

// stopPromoter uncounts a subscription on topic and stops the topic's
// promoter with the last: the promoter releases its lock and ends by
// itself (within unlockWait), so that closing a subscription never waits
// for it; Close waits for every promoter.
func (b *Backend) stopPromoter(topic string) {
	b.promoMu.Lock()
	p := b.promoters[topic]
	if p != nil {
		p.refs--
	}
	if p == nil || p.refs > 0 {
		b.promoMu.Unlock()
		return
	}
	delete(b.promoters, topic)
	b.promoMu.Unlock()
	p.cancel()
}

// stopPromoters stops every promoter (Close).
func (b *Backend) stopPromoters() {
	b.promoMu.Lock()
	ps := slices.Collect(maps.Values(b.promoters))
	clear(b.promoters)
	b.promoMu.Unlock()
	for _, p := range ps {
		p.cancel()
	}
	b.promoWG.Wait()
}

// run takes the topic's promoter lock whenever it is free and leads
// while it holds it, until ctx ends.
func (p *promoter) run(ctx context.Context) {
	holder := nuid.Next()
	failing := false
	for {
		// A stream that stores no schedules (or does not exist yet)
		// needs no promoter, nor the lock's bucket.
		held, err := false, error(nil)
		if p.b.schedulesReady(ctx, p.b.namesFor(p.topic), p.topic) {
			held, _, err = p.b.LockGroup(ctx, p.topic, promoterGroup, holder, promoterTTL)
		}
		if held {
			err = p.lead(ctx, holder)
			p.unlock(holder)
		}
		if ctx.Err() != nil {
			return
		}
		if err != nil && !failing {
			// Once per streak of failures: the messages wait, and a
			// user must know why.
			p.obs.Observe(context.Background(), observer.Event{Scope: observer.ScopeNack, Topic: p.topic,
				Err: fmt.Errorf("nats: promote the delayed messages of %q: %w", p.topic, err)})
		}
		failing = err != nil
		t := time.NewTimer(promoterTTL / 3)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// unlock releases the lock, within unlockWait.
func (p *promoter) unlock(holder string) {
	ctx, cancel := context.WithTimeout(context.Background(), unlockWait)
	defer cancel()
	_ = p.b.UnlockGroup(ctx, p.topic, promoterGroup, holder)
}

// lead promotes the topic's due schedules while it holds the lock: until
// ctx ends (nil), another member took the lock (nil), or it could not
// read the schedules or renew the lock (the error).
func (p *promoter) lead(ctx context.Context, holder string) error {
	tn := p.b.namesFor(p.topic)
	st, err := p.b.js.Stream(ctx, tn.stream)
	if err != nil {
		return fmt.Errorf("look up stream %q: %w", tn.stream, err)
	}
	q := &dueQueue{wake: make(chan struct{}, 1)}
	cons, err := p.b.js.OrderedConsumer(ctx, tn.stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{p.b.schedPattern(p.topic)},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return fmt.Errorf("read the schedules: %w", err)
	}
	cc, err := cons.Consume(q.add)
	if err != nil {
		return fmt.Errorf("read the schedules: %w", err)
	}
	defer func() {
		cc.Stop()
		<-cc.Closed()
	}()
	dels := make(chan []uint64, deleteQueue)
	deleted := make(chan struct{})
	go deleteSchedules(ctx, st, dels, deleted)
	defer func() {
		close(dels)
		<-deleted
	}()
	p.leading.Store(true)
	defer p.leading.Store(false)
	renewed := time.Now()
	renew := time.NewTicker(promoterTTL / 4)
	defer renew.Stop()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		next := p.promoteDue(ctx, st, tn, q, dels)
		wait := time.Hour
		if !next.IsZero() {
			wait = max(time.Until(next), 0)
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return nil
		case <-cc.Closed():
			return errors.New("the reader of the schedules stopped")
		case <-q.wake:
		case <-timer.C:
		case <-renew.C:
			held, _, err := p.b.LockGroup(ctx, p.topic, promoterGroup, holder, promoterTTL)
			switch {
			case err == nil && held:
				renewed = time.Now()
			case err == nil:
				return nil // another member's promoter took over
			case time.Since(renewed) > promoterTTL/2:
				return fmt.Errorf("renew the promoter's lock: %w", err)
			}
		}
	}
}

// promoteDue promotes up to promoteBatch due schedules and returns when
// to look again (zero: nothing is scheduled).
func (p *promoter) promoteDue(ctx context.Context, st jetstream.Stream, tn *topicNames, q *dueQueue, dels chan<- []uint64) time.Time {
	now := time.Now()
	if now.Before(q.retryAt) {
		return q.retryAt
	}
	if batch := q.popDue(now.Add(promoteLead).UnixMilli(), promoteBatch); len(batch) > 0 {
		if failed := p.promote(ctx, st, tn, batch, dels); len(failed) > 0 {
			q.pushAll(failed)
			q.retryAt = time.Now().Add(promoteRetry)
			return q.retryAt
		}
	}
	if next := q.next(); !next.IsZero() {
		return next.Add(-promoteLead)
	}
	return time.Time{}
}

// promote stores a copy of each schedule of batch on the topic's subject,
// in batch order, and hands the schedules whose copy was stored to the
// deleter (dels). It returns the entries to try again.
func (p *promoter) promote(ctx context.Context, st jetstream.Stream, tn *topicNames, batch []dueEntry, dels chan<- []uint64) []dueEntry {
	var missing []int
	for i, e := range batch {
		if e.msg == nil {
			missing = append(missing, i)
		}
	}
	errs := make([]error, len(batch))
	each(len(missing), func(j int) {
		i := missing[j]
		raw, err := st.GetMsg(ctx, batch[i].seq)
		if err == nil {
			batch[i].msg = &schedMsg{header: raw.Header, data: raw.Data, stored: raw.Time}
		}
		errs[i] = err
	})
	futures := make([]jetstream.PubAckFuture, len(batch))
	var failed []dueEntry
	for i, e := range batch {
		switch {
		case errors.Is(errs[i], jetstream.ErrMsgNotFound):
			// Promoted by another leader, or deleted with the topic.
			continue
		case errs[i] != nil:
			failed = append(failed, e)
			continue
		}
		f, err := p.b.js.PublishMsgAsync(copyOfSchedule(tn, e.msg, e.seq))
		if err != nil {
			failed = append(failed, e)
			continue
		}
		futures[i] = f
	}
	var stored []uint64
	for i, f := range futures {
		if f == nil {
			continue
		}
		select {
		case <-f.Ok():
			stored = append(stored, batch[i].seq)
		case <-f.Err():
			failed = append(failed, batch[i])
		case <-ctx.Done():
			failed = append(failed, batch[i])
		}
	}
	if len(stored) > 0 {
		select {
		case dels <- stored:
		case <-ctx.Done():
		}
	}
	return failed
}

// deleteQueue bounds the rounds of promoted schedules waiting for the
// deleter.
const deleteQueue = 64

// deleteSchedules deletes the promoted schedules it receives on dels
// until dels closes, then closes done. It runs apart from promotion, so
// that a round's deletes never hold back the next round's copies. A
// schedule whose delete fails stays: the next leader promotes it again,
// and the stream drops that copy within its duplicates window.
func deleteSchedules(ctx context.Context, st jetstream.Stream, dels <-chan []uint64, done chan<- struct{}) {
	defer close(done)
	for seqs := range dels {
		if ctx.Err() != nil {
			continue
		}
		each(len(seqs), func(i int) { _ = st.DeleteMsg(ctx, seqs[i]) })
	}
}

// schedMsg is a stored schedule: its headers, payload and store time.
type schedMsg struct {
	header natsgo.Header
	data   []byte
	stored time.Time
}

// size is what holding the schedule in memory costs, roughly.
func (m *schedMsg) size() int64 {
	n := len(m.data)
	for k, vs := range m.header {
		n += len(k)
		for _, v := range vs {
			n += len(v)
		}
	}
	return int64(n)
}

// copyOfSchedule is the message that promotes the schedule raw (stream
// sequence seq) to the topic's subject: its headers and payload as
// stored, without the server's headers, with the message ID in hdrID,
// the schedule's store time in hdrPublished and a Nats-Msg-Id of its own.
func copyOfSchedule(tn *topicNames, raw *schedMsg, seq uint64) *natsgo.Msg {
	h := make(natsgo.Header, len(raw.header)+3)
	for k, v := range raw.header {
		if !isNATSHeader(k) {
			h[k] = v
		}
	}
	var m backend.Message
	decodeHeaders(raw.header, &m, tn.idScope)
	if m.ID != "" {
		h[hdrID] = []string{m.ID}
	}
	if len(h[hdrPublished]) == 0 {
		h[hdrPublished] = []string{strconv.FormatInt(raw.stored.UnixNano(), 10)}
	}
	h[hdrMsgID] = []string{raw.header.Get(hdrMsgID) + "#due-" + strconv.FormatUint(seq, 10)}
	return &natsgo.Msg{Subject: tn.subject, Header: h, Data: raw.data}
}

// dueEntry is a schedule: when it is due (Unix ms), its stream
// sequence, and the schedule itself while the queue holds it in memory
// (nil: read it again by sequence when it is due).
type dueEntry struct {
	due int64
	seq uint64
	msg *schedMsg
}

// heldBudget bounds the bytes of schedules a leader holds in memory
// (dueEntry.msg); beyond it, schedules are read again when they are due.
const heldBudget = 64 << 20

// dueQueue holds the schedules the leader knows of, first due first,
// and in stream order among those due at the same time. The reader adds
// to it (add); the leader takes from it.
type dueQueue struct {
	mu   sync.Mutex
	h    dueHeap
	held int64         // bytes of the schedules in h held in memory
	wake chan struct{} // signalled when an entry is added
	// retryAt is when failed promotions are tried again; the leader's
	// goroutine only.
	retryAt time.Time
}

// add is the reader's handler: it adds the schedule msg, held in memory
// within heldBudget. A server schedule (published by an earlier
// version of this package on 2.12 and later) is the server's to fire; a
// schedule without a due time is due now.
func (q *dueQueue) add(msg jetstream.Msg) {
	h := msg.Headers()
	if h.Get(jetstream.ScheduleHeader) != "" {
		return
	}
	meta, err := msg.Metadata()
	if err != nil {
		return
	}
	var due int64
	if v := h[backend.HeaderDeliverAt]; len(v) > 0 {
		due, _ = strconv.ParseInt(v[0], 10, 64)
	}
	e := dueEntry{due: due, seq: meta.Sequence.Stream, msg: &schedMsg{header: h, data: msg.Data(), stored: meta.Timestamp}}
	q.mu.Lock()
	if n := e.msg.size(); q.held+n <= heldBudget {
		q.held += n
	} else {
		e.msg = nil
	}
	heap.Push(&q.h, e)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// popDue takes up to n entries due at or before now (Unix ms), in order.
func (q *dueQueue) popDue(now int64, n int) []dueEntry {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []dueEntry
	for len(out) < n && len(q.h) > 0 && q.h[0].due <= now {
		e := heap.Pop(&q.h).(dueEntry)
		if e.msg != nil {
			q.held -= e.msg.size()
		}
		out = append(out, e)
	}
	return out
}

func (q *dueQueue) pushAll(es []dueEntry) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, e := range es {
		if e.msg != nil {
			if n := e.msg.size(); q.held+n <= heldBudget {
				q.held += n
			} else {
				e.msg = nil
			}
		}
		heap.Push(&q.h, e)
	}
}

// next is when the first entry is due (zero: none).
func (q *dueQueue) next() time.Time {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.h) == 0 {
		return time.Time{}
	}
	return time.UnixMilli(q.h[0].due)
}

// dueHeap orders entries by due time, then stream sequence.
type dueHeap []dueEntry

func (h dueHeap) Len() int { return len(h) }
func (h dueHeap) Less(i, j int) bool {
	return h[i].due < h[j].due || h[i].due == h[j].due && h[i].seq < h[j].seq
}
func (h dueHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)   { *h = append(*h, x.(dueEntry)) }
func (h *dueHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}
