package redisstream

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/recvbuf"
	"github.com/eventbus-go/bus/observer"
)

// entryRef is the AckID of a delivery: a pointer to its stream entry ID
// and the entry's delivery count when it was handed out. Refs are
// allocated one array per batch, so handing out an AckID costs no
// allocation per message (a string in an interface would).
//
// The count makes stale settlements detectable: every delivery of an
// entry (XREADGROUP, XAUTOCLAIM) increments its delivery count in the
// group's pending list, while Nack, Extend and the promoter do not
// (XCLAIM ... JUSTID). A settlement whose consumer and count no longer
// match the pending entry belongs to an earlier delivery.
type entryRef struct {
	id    string
	count int
}

// entryOf returns the delivery behind an AckID.
func entryOf(id backend.AckID) (*entryRef, bool) {
	r, ok := id.(*entryRef)
	if !ok || r == nil {
		return nil, false
	}
	return r, true
}

// subscription is one consumer of a group. Receive is called from one
// goroutine; the settlement methods from any.
type subscription struct {
	b        *Backend
	topic    string
	keys     keys
	cfg      backend.SubscribeConfig
	consumer string
	ts       *topicState
	rc       *reclaimer

	// DeadLetter is atomic in a Lua script when the dead-letter stream
	// shares the source's slot (always on a single node).
	dlqKey    string
	dlqAtomic bool

	readArgs redis.XReadGroupArgs
	streams  [2]string
	reader   reader
	// ackHead is the start of every XACK, boxed once.
	ackHead [3]any
	// Scratch space of raw reads, reused by Receive (one goroutine).
	entries []rawEntry
	fields  []rawField
	ids     []byte
	recv    recvbuf.Buffer // messages of the last Receive, reused by the next

	closed    atomic.Bool
	closeOnce sync.Once

	// leaseMs is the group's lease as this member last read it: the
	// longest ack timeout of the group's members (groupLeaseScript),
	// never shorter than its own. Nack and Release set idle times by it.
	leaseMs atomic.Int64

	// found and asked are the entries the last XREADGROUP found and the
	// COUNT it asked for, started when it started; prevFound and
	// prevStarted are the same of the read before it. lingerBeforeRead
	// decides on them (Receive's goroutine only, like the timer).
	found, asked int
	started      time.Time
	prevFound    int
	prevStarted  time.Time
	lingerTimer  *time.Timer
	// lingerWait and lingerClock, when set (by tests), replace the wait
	// of a linger and the clock its decision reads.
	lingerWait  func(ctx context.Context, d time.Duration) error
	lingerClock func() time.Time

	nogroupWait time.Duration // backoff between group re-creations
	lastNoGroup time.Time

	// handed is the highest entry ID this subscription handed out;
	// recovering: a read's reply was lost, so the next Receive takes back
	// what it may have taken first (recover.go); noFence: the server
	// refused CLIENT KILL. Receive's goroutine only.
	handed     string
	recovering bool
	noFence    bool
}

var (
	_ backend.Subscription = (*subscription)(nil)
	_ backend.Extender     = (*subscription)(nil)
	_ backend.DeadLetterer = (*subscription)(nil)
)

func newSubscription(b *Backend, topic string, k keys, cfg backend.SubscribeConfig, ts *topicState, rc *reclaimer) *subscription {
	s := &subscription{
		b: b, topic: topic, keys: k, cfg: cfg, ts: ts, rc: rc,
		consumer: consumerName(),
	}
	if cfg.DeadLetterTopic != "" {
		s.dlqKey = streamKey(b.opts.Prefix, cfg.DeadLetterTopic)
		s.dlqAtomic = !b.cluster || slotOf(s.dlqKey) == slotOf(k.stream)
	}
	s.reader = reader{b: b, stream: k.stream}
	s.streams = [2]string{k.stream, ">"}
	s.readArgs = redis.XReadGroupArgs{Group: cfg.Group, Consumer: s.consumer, Streams: s.streams[:]}
	s.ackHead = [3]any{"XACK", k.stream, cfg.Group}
	b.mu.Lock()
	if ts.obs == nil {
		ts.obs = cfg.Observer
	}
	b.mu.Unlock()
	return s
}

// consumerName returns a name unique to one subscription: host, process
// and 64 random bits.
func consumerName() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "host"
	}
	var r [8]byte
	_, _ = rand.Read(r[:])
	return host + "-" + strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(r[:])
}

// receiveErr marks a receive error that no retry can fix with
// backend.Permanent, so the bus ends the subscription instead of retrying
// forever: the server refuses the command or key by its ACL (NOPERM,
// NOAUTH), the key holds another type (WRONGTYPE), or the server lacks a
// command the backend needs (unknown command: not Redis 7, or renamed).
// Connection errors, timeouts, LOADING, BUSY, MASTERDOWN, READONLY and
// cluster redirections are left to the bus's backoff.
func receiveErr(err error) error {
	if isPermanentRedisErr(err) {
		return backend.Permanent(err)
	}
	return err
}

func isPermanentRedisErr(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	for _, p := range []string{"NOPERM", "NOAUTH", "WRONGTYPE", "ERR unknown command", "ERR unknown subcommand"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

func (s *subscription) errf(op string, err error) error {
	return fmt.Errorf("redisstream: %s %q: %w", op, s.topic, err)
}

func (s *subscription) observe(scope observer.Scope, id string, attempt int, err error) {
	s.cfg.Observer.Observe(context.Background(), observer.Event{
		Scope: scope, Topic: s.topic, Group: s.cfg.Group, MessageID: id, Attempt: attempt, Err: err,
	})
}

// ended reports whether the subscription or its backend was closed.
func (s *subscription) ended() bool { return s.closed.Load() || s.b.isClosed() }

// Receive returns up to max messages: first entries whose lease ran out
// (when a reclaim is due), otherwise new entries read with a blocking
// XREADGROUP on the backend's read client.
func (s *subscription) Receive(ctx context.Context, max int) ([]*backend.Message, error) {
	if s.ended() {
		// Backend.Close ends the subscriptions still open.
		return nil, s.errf("receive", backend.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if s.rc.due(time.Now()) && s.rc.tryLock() {
		msgs, err := s.reclaim(ctx, max)
		s.rc.unlock()
		if err != nil {
			if s.ended() {
				return nil, s.errf("receive", backend.ErrClosed)
			}
			return nil, err
		}
		if len(msgs) > 0 {
			return msgs, nil
		}
	}
	if s.recovering {
		msgs, err := s.recoverOwn(ctx, max)
		if err != nil {
			if s.ended() {
				return nil, s.errf("receive", backend.ErrClosed)
			}
			return nil, err
		}
		if len(msgs) > 0 {
			return msgs, nil
		}
	}
	now, err := s.lingerBeforeRead(ctx)
	if err != nil {
		return nil, err
	}
	s.prevFound, s.prevStarted, s.started = s.found, s.started, now
	args := s.readArgs
	args.Count = int64(max)
	args.Block = s.blockFor(now)
	rctx, done := s.wakeable(ctx, now, args.Block)
	lost := s.reader.lostTotal()
	rr := s.reader.read(rctx, &args)
	woken := done()
	if s.reader.lostTotal() != lost {
		// The read was given up on: it may have taken entries.
		s.recovering = true
	}
	defer s.reader.recycle(rr)
	s.found, s.asked = 0, max
	if err := rr.err; err != nil {
		if woken && errors.Is(err, context.Canceled) {
			// A reclaim is due: the next Receive runs it.
			return nil, nil
		}
		return nil, s.readErr(ctx, err)
	}
	if rr.raw != nil {
		return s.decodeRaw(ctx, rr.raw)
	}
	if len(rr.res) == 0 {
		return nil, nil
	}
	return s.decodeEntries(ctx, rr.res[0].Messages), nil
}

// readErr is what Receive returns for a read that failed.
func (s *subscription) readErr(ctx context.Context, err error) error {
	switch {
	case errors.Is(err, redis.Nil):
		return nil // BLOCK ran out
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, errReaderClosed) || s.ended():
		// Closed while the read was in progress: whatever the client
		// said, the answer is that the member is closed.
		return s.errf("receive", backend.ErrClosed)
	case isNoGroup(err):
		return s.recoverGroup(ctx, err)
	}
	return receiveErr(s.errf("receive", err))
}

// decodeEntries turns the entries of a typed read into messages (first
// deliveries); malformed ones are quarantined and deleted ones acked.
func (s *subscription) decodeEntries(ctx context.Context, entries []redis.XMessage) []*backend.Message {
	s.found = len(entries)
	if len(entries) > 0 {
		s.noteHanded(entries[len(entries)-1].ID)
	}
	vals, msgs := s.recv.Next(len(entries))
	refs := make([]entryRef, len(entries))
	var trimmed []string
	for i := range entries {
		e := &entries[i]
		m := &vals[i]
		if e.Values == nil {
			// Deleted between delivery and read: nothing to hand out.
			trimmed = append(trimmed, e.ID)
			continue
		}
		if err := decode(e.ID, e.Values, m); err != nil {
			s.quarantine(ctx, e.ID, e.Values, 1, err)
			continue
		}
		refs[i] = entryRef{id: e.ID, count: 1}
		m.AckID = &refs[i]
		m.Attempt = 1
		msgs = append(msgs, m)
	}
	s.dropTrimmed(ctx, trimmed)
	return msgs
}

// decodeRaw turns the raw reply of a read that found entries into
// messages. Entries the bus wrote take the fast path (decodeFields);
// anything else is decoded from its field map, which gives the canonical
// error of a malformed entry.
func (s *subscription) decodeRaw(ctx context.Context, raw []byte) ([]*backend.Message, error) {
	entries, fields, err := parseXRead(raw, s.entries[:0], s.fields[:0])
	defer func() {
		// Keep the scratch space, but no reference into the reply.
		clear(entries)
		clear(fields)
		s.entries, s.fields = entries[:0], fields[:0]
	}()
	if err != nil {
		// Entries the read took stay pending: the next Receive takes
		// them back first.
		s.recovering = true
		return nil, s.errf("receive", err)
	}
	s.found = len(entries)
	vals, msgs := s.recv.Next(len(entries))
	refs := make([]entryRef, len(entries))
	payloads := newPayloadSlab(entries, fields)
	var trimmed []string
	last := ""
	defer func() { s.noteHanded(last) }()
	for i, e := range entries {
		if e.deleted {
			trimmed = append(trimmed, string(e.id))
			last = trimmed[len(trimmed)-1]
			continue
		}
		m := &vals[i]
		fs := fields[e.start:e.end]
		var id string
		if msgID, ok := decodeFields(fs, m, payloads); ok {
			// One string holds the entry ID and the message ID.
			s.ids = append(append(s.ids[:0], e.id...), msgID...)
			both := string(s.ids)
			id, m.ID = both[:len(e.id)], both[len(e.id):]
			last = id
		} else {
			id = string(e.id)
			last = id
			values := fieldMap(fs)
			if err := decode(id, values, m); err != nil {
				s.quarantine(ctx, id, values, 1, err)
				continue
			}
		}
		refs[i] = entryRef{id: id, count: 1}
		m.AckID = &refs[i]
		m.Attempt = 1
		msgs = append(msgs, m)
	}
	s.dropTrimmed(ctx, trimmed)
	return msgs, nil
}

// A read lingers (see lingerBeforeRead) only after one that found at
// least readLingerMin entries while they arrived at readLingerRate or
// more.
const (
	// readLingerMin: a read that found fewer met a quiet stream, where
	// waiting would add latency and save next to no reads.
	readLingerMin = 8
	// readLingerRate, in entries a second over the last two reads: below
	// it the reads are not what bounds the subscription (at 20,000 a
	// second they take each publisher's batch as it comes), and a wait
	// would only add latency. Two reads, because a read that was woken by
	// the first entry of a batch finds one, and the one right after it
	// finds the rest of the batch within a round trip: either alone
	// misjudges the rate.
	readLingerRate = 50_000
)

// lingerBeforeRead waits Options.ReadLinger before a read when the last
// one found a busy stream: at least readLingerMin entries, at
// readLingerRate or more over the last two reads, and fewer than half of
// its COUNT. Entries then arrive about as fast as they are read, so each
// read would take a few, paying a round trip and a wakeup of the server's
// blocked-client path for each handful; after the wait one read takes
// what arrived meanwhile. No other read is delayed: not on a quiet or
// moderately busy stream, where a message must not wait, nor on a
// backlog (half its COUNT or more), where the next read finds entries at
// once. It returns the time the read starts; the wait ends early, with
// ctx.Err(), when ctx ends.
func (s *subscription) lingerBeforeRead(ctx context.Context) (time.Time, error) {
	clock := time.Now
	if s.lingerClock != nil {
		clock = s.lingerClock
	}
	now := clock()
	d := s.b.opts.ReadLinger
	if d <= 0 || s.found < readLingerMin || 2*s.found >= s.asked ||
		float64(s.prevFound+s.found) < readLingerRate*now.Sub(s.prevStarted).Seconds() {
		return now, nil
	}
	if s.lingerWait != nil {
		return now, s.lingerWait(ctx, d)
	}
	if s.lingerTimer == nil {
		s.lingerTimer = time.NewTimer(d)
	} else {
		s.lingerTimer.Reset(d)
	}
	select {
	case <-s.lingerTimer.C:
		return clock(), nil
	case <-ctx.Done():
		s.lingerTimer.Stop()
		return now, ctx.Err()
	}
}

// blockFor returns the XREADGROUP BLOCK: the configured block, cut short
// when the next reclaim is due sooner (rounded up to the millisecond, the
// unit of BLOCK, so the read does not end just before it), and never 0
// (which blocks forever).
func (s *subscription) blockFor(now time.Time) time.Duration {
	block := s.b.opts.Block
	if until := s.rc.until(now); until < block {
		block = time.Duration(ceilMs(until)) * time.Millisecond
	}
	return max(block, 10*time.Millisecond)
}

// wakeable returns the ctx of a read that starts at now and blocks for
// block, registered with the reclaimer, which ends it (and with it the
// read, by CLIENT UNBLOCK) when an entry this process gave back becomes
// claimable before the read's end. done unregisters the read when it
// returned and reports whether it was woken so.
func (s *subscription) wakeable(ctx context.Context, now time.Time, block time.Duration) (rctx context.Context, done func() (woken bool)) {
	if s.b.inlineReads && s.reader.lastFound {
		block = min(block, inlineBlock) // see reader.read
	}
	rctx, wake := context.WithCancelCause(ctx)
	br := s.rc.waitRead(now.Add(block), wake)
	return rctx, func() bool {
		s.rc.readDone(br)
		woken := ctx.Err() == nil && errors.Is(context.Cause(rctx), errWoken)
		wake(nil)
		return woken
	}
}

// recoverGroup re-creates a consumer group that vanished (the server lost
// its data, or someone deleted the stream or group). It starts at the
// oldest entry, so nothing published after the loss is skipped, and
// reports the loss. Repeated losses back off up to 5s.
func (s *subscription) recoverGroup(ctx context.Context, cause error) error {
	now := time.Now()
	if now.Sub(s.lastNoGroup) < 10*time.Second {
		s.nogroupWait = min(max(2*s.nogroupWait, 100*time.Millisecond), 5*time.Second)
	} else {
		s.nogroupWait = 0
	}
	s.lastNoGroup = now
	if s.nogroupWait > 0 {
		t := time.NewTimer(s.nogroupWait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
	if err := s.b.call(ctx, func(ctx context.Context) error {
		if err := createGroup(ctx, s.b.client, s.keys.stream, s.cfg.Group, "0"); err != nil {
			return err
		}
		return createConsumer(ctx, s.b.client, s.keys.stream, s.cfg.Group, s.consumer)
	}); err != nil {
		return receiveErr(s.errf("recreate group", err))
	}
	s.b.stats.recreated.Add(1)
	s.handed = "" // the new group delivers from the oldest entry
	s.observe(observer.ScopeReclaim, "", 0, s.errf("receive", fmt.Errorf(
		"consumer group %q was missing (%v); re-created from the oldest retained entry: unsettled messages of the group may have been lost on the server", s.cfg.Group, cause)))
	return nil
}

// Ack acks the entries with one XACK.
func (s *subscription) Ack(ctx context.Context, ids []backend.AckID) error {
	if len(ids) == 0 {
		return nil
	}
	args := make([]any, 0, len(s.ackHead)+len(ids))
	args = append(args, s.ackHead[:]...)
	for _, id := range ids {
		e, ok := entryOf(id)
		if !ok {
			return s.errf("ack", fmt.Errorf("foreign ack id %T", id))
		}
		args = append(args, &e.id) // a pointer boxes without an allocation
	}
	// XACK settles the entry whoever holds it now: an Ack of a delivery
	// whose lease ran out still settles a message that is unsettled, and
	// one already settled is a no-op.
	if err := s.b.call(ctx, func(ctx context.Context) error {
		return s.b.client.Do(ctx, args...).Err()
	}); err != nil {
		return s.errf("ack", err)
	}
	return nil
}

// Nack makes the entry claimable again after delay, atomically and
// without losing it: it stays in the group's pending list throughout. A
// stale id (the entry was settled, or delivered again since) changes
// nothing and returns an error wrapping backend.ErrStale.
func (s *subscription) Nack(ctx context.Context, id backend.AckID, delay time.Duration) error {
	return s.giveBack(ctx, "nack", id, delay, true)
}

// giveBack makes the entry claimable again after delay (nackScript),
// counting the delivery or not.
func (s *subscription) giveBack(ctx context.Context, op string, id backend.AckID, delay time.Duration, counted bool) error {
	e, ok := entryOf(id)
	if !ok {
		return s.errf(op, fmt.Errorf("foreign ack id %T", id))
	}
	uncount := "0"
	if !counted {
		uncount = "1"
	}
	at := s.lease()
	idle := at.Milliseconds() + 1 // claimable at once
	// claimable is how long after the script's reply the entry is
	// claimable at the latest.
	claimable := time.Duration(0)
	hold, member := "0", ""
	switch {
	case delay <= 0:
	case delay < at:
		// Claimable once the server's clock, which counts whole
		// milliseconds, has moved on by at-idle since the script ran:
		// the delay rounded up, and one more for the millisecond the
		// script started in, so that it is never early.
		idle = max(at.Milliseconds()-ceilMs(delay)-1, 0)
		claimable = at - time.Duration(idle)*time.Millisecond
	default:
		// The promoter makes it claimable at the hold's time: the due
		// time rounded up to the millisecond, and one more as above.
		idle = 0
		due := time.Now().Add(delay)
		ms := due.UnixMilli()
		if due.Nanosecond()%int(time.Millisecond) != 0 {
			ms++
		}
		hold = strconv.FormatInt(ms+1, 10)
		member = s.cfg.Group + "\x00" + e.id + "\x00" + strconv.FormatInt(at.Milliseconds(), 10)
		claimable = delay + 2*time.Millisecond
	}
	var r int64
	err := s.b.call(ctx, func(ctx context.Context) error {
		var err error
		r, err = nackScript.Run(ctx, s.b.client, []string{s.keys.stream, s.keys.hold},
			s.cfg.Group, s.consumer, e.id, idle, hold, member, e.count, uncount).Int64()
		return err
	})
	if err != nil {
		return s.errf(op, err)
	}
	if err := staleErr(e, r); err != nil {
		return s.errf(op, err)
	}
	if hold != "0" {
		s.ts.wake()
	}
	s.rc.dueAt(time.Now().Add(claimable))
	return nil
}

// ceilMs returns d in milliseconds, rounded up.
func ceilMs(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// staleErr turns the reply of a settlement script into an error wrapping
// backend.ErrStale (0: no longer pending; -1: delivered again since).
func staleErr(e *entryRef, r int64) error {
	switch r {
	case 0:
		return fmt.Errorf("entry %s is no longer pending: %w", e.id, backend.ErrStale)
	case -1:
		return fmt.Errorf("entry %s was delivered again after delivery %d: %w", e.id, e.count, backend.ErrStale)
	}
	return nil
}

// Extend resets the entry's idle time without counting a delivery. A
// stale id returns an error wrapping backend.ErrStale.
func (s *subscription) Extend(ctx context.Context, id backend.AckID) error {
	e, ok := entryOf(id)
	if !ok {
		return s.errf("extend", fmt.Errorf("foreign ack id %T", id))
	}
	var r int64
	err := s.b.call(ctx, func(ctx context.Context) error {
		var err error
		r, err = extendScript.Run(ctx, s.b.client, []string{s.keys.stream}, s.cfg.Group, s.consumer, e.id, e.count).Int64()
		return err
	})
	if err != nil {
		return s.errf("extend", err)
	}
	if err := staleErr(e, r); err != nil {
		return s.errf("extend", err)
	}
	return nil
}

// DeadLetter adds msg to the dead-letter topic and acks the original in one
// Lua script. On a cluster, when the dead-letter topic lives in another
// slot, it adds the copy first and acks after, so a crash in between can
// leave a duplicate in the dead-letter topic but never lose the message.
// A stale id writes nothing and returns an error wrapping
// backend.ErrStale.
func (s *subscription) DeadLetter(ctx context.Context, id backend.AckID, topic string, msg *backend.Message) error {
	e, ok := entryOf(id)
	if !ok {
		return s.errf("dead-letter", fmt.Errorf("foreign ack id %T", id))
	}
	fields := appendFields(make([]any, 0, fieldCount(msg)), msg, appendMeta(nil, msg))
	var r int64
	err := s.b.call(ctx, func(ctx context.Context) error {
		var err error
		r, err = s.moveToDeadLetter(ctx, e, topic, fields)
		return err
	})
	if err != nil {
		return s.errf("dead-letter", err)
	}
	if err := staleErr(e, r); err != nil {
		return s.errf("dead-letter", err)
	}
	return nil
}

// moveToDeadLetter moves entry e to topic if this consumer still holds
// the same delivery of it. It returns 1 when moved, 0 when the entry is no
// longer pending and -1 when it was delivered again since.
func (s *subscription) moveToDeadLetter(ctx context.Context, e *entryRef, topic string, fields []any) (int64, error) {
	dlq := s.dlqKey
	atomicMove := s.dlqAtomic
	if topic != s.cfg.DeadLetterTopic {
		dlq = streamKey(s.b.opts.Prefix, topic)
		atomicMove = !s.b.cluster || slotOf(dlq) == slotOf(s.keys.stream)
	}
	maxLen := "0"
	if s.b.opts.MaxLen > 0 {
		maxLen = strconv.FormatInt(s.b.opts.MaxLen, 10)
	}
	if atomicMove {
		args := make([]any, 0, 5+len(fields))
		args = append(args, s.cfg.Group, e.id, maxLen, s.consumer, e.count)
		args = append(args, fields...)
		return deadLetterScript.Run(ctx, s.b.client, []string{s.keys.stream, dlq}, args...).Int64()
	}
	p, err := s.b.client.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: s.keys.stream, Group: s.cfg.Group, Start: e.id, End: e.id, Count: 1}).Result()
	if err != nil {
		return 0, err
	}
	if len(p) == 0 {
		return 0, nil
	}
	if p[0].Consumer != s.consumer || e.count != 0 && p[0].RetryCount != int64(e.count) {
		return -1, nil
	}
	a := &redis.XAddArgs{Stream: dlq, Values: fields}
	if maxLen != "0" {
		a.MaxLen, a.Approx = s.b.opts.MaxLen, true
	}
	if err := s.b.client.XAdd(ctx, a).Err(); err != nil {
		return 0, err
	}
	return 1, s.b.client.XAck(ctx, s.keys.stream, s.cfg.Group, e.id).Err()
}

// quarantine dead-letters (when a dead-letter topic is set) and acks a
// malformed entry, and reports it. It never reaches the handler. It is
// bounded by the Receive ctx: an entry left pending when ctx ends is
// reclaimed and quarantined again after its lease.
func (s *subscription) quarantine(ctx context.Context, id string, values map[string]any, attempt int, cause error) {
	s.b.stats.malformed.Add(1)
	err := s.errf("decode", cause)
	if s.cfg.DeadLetterTopic == "" {
		if aerr := s.b.call(ctx, func(ctx context.Context) error {
			return s.b.client.XAck(ctx, s.keys.stream, s.cfg.Group, id).Err()
		}); aerr != nil {
			err = errors.Join(err, fmt.Errorf("ack: %w", aerr))
		} else {
			err = fmt.Errorf("%w (acked and dropped: dead-lettering is off)", err)
		}
		s.observe(observer.ScopeDecode, id, attempt, err)
		return
	}
	dl := malformedCopy(id, values, s.topic, s.cfg.Group, attempt, cause)
	fields := appendFields(nil, dl, appendMeta(nil, dl))
	var r int64
	derr := s.b.call(ctx, func(ctx context.Context) error {
		var err error
		// Count 0: the entry was just handed to this consumer; only
		// its ownership is checked.
		r, err = s.moveToDeadLetter(ctx, &entryRef{id: id}, s.cfg.DeadLetterTopic, fields)
		return err
	})
	switch {
	case derr != nil:
		err = errors.Join(err, fmt.Errorf("dead-letter to %q: %w", s.cfg.DeadLetterTopic, derr))
	case r != 1:
		err = fmt.Errorf("%w (settled by another consumer meanwhile)", err)
	default:
		err = fmt.Errorf("%w (moved to %q)", err, s.cfg.DeadLetterTopic)
	}
	s.observe(observer.ScopeDecode, id, attempt, err)
}

// dropTrimmed acks entries that were deleted from the stream while pending
// (their values are gone) and reports them: they cannot be delivered.
func (s *subscription) dropTrimmed(ctx context.Context, ids []string) {
	if len(ids) == 0 {
		return
	}
	err := fmt.Errorf("%d pending entries were trimmed or deleted from the stream before they were settled (first %s); they are lost and were acked", len(ids), ids[0])
	if aerr := s.b.call(ctx, func(ctx context.Context) error {
		return s.b.client.XAck(ctx, s.keys.stream, s.cfg.Group, ids...).Err()
	}); aerr != nil {
		err = errors.Join(err, fmt.Errorf("ack: %w", aerr))
	}
	// Reported before counted: whoever sees the count sees the event.
	s.observe(observer.ScopeReclaim, ids[0], 0, s.errf("reclaim", err))
	s.b.stats.trimmed.Add(int64(len(ids)))
}

// Close stops the subscription and removes its consumer from the group if
// it owns no pending entry. Unsettled entries stay pending and are
// reclaimed by other members after their lease. Close has no ctx: the
// removal is bounded by closeTimeout (100ms), after which the consumer is
// left in the group.
func (s *subscription) Close() error {
	var err error
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		s.reader.close()
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()
		e := s.b.async(ctx, func(ctx context.Context) error {
			return dropConsumerScript.Run(ctx, s.b.client, []string{s.keys.stream}, s.cfg.Group, s.consumer).Err()
		})
		switch {
		case e == nil || isNoGroup(e):
		case errors.Is(e, context.DeadlineExceeded):
			// The removal ran out of its bound (a slow or dead link): the
			// consumer stays in the group, owning nothing, which is
			// harmless; say so once instead of failing the close.
			s.cfg.Observer.Observe(context.Background(), observer.Event{Scope: observer.ScopeShutdown, Topic: s.topic, Group: s.cfg.Group,
				Err: fmt.Errorf("redisstream: close %q: consumer %q left in the group: removal took longer than %v", s.topic, s.consumer, closeTimeout)})
		default:
			err = s.errf("close", e)
		}
		s.b.release(s.topic, s.cfg)
	})
	return err
}

// lease is the group's lease as this member knows it (see leaseMs).
func (s *subscription) lease() time.Duration {
	return max(time.Duration(s.leaseMs.Load())*time.Millisecond, s.cfg.AckTimeout)
}

// noteLease records the group's lease read from Redis; it only grows.
func (s *subscription) noteLease(ms int64) {
	for {
		cur := s.leaseMs.Load()
		if ms <= cur || s.leaseMs.CompareAndSwap(cur, ms) {
			return
		}
	}
}

// joinLease records this member's ack timeout in the group's lease and
// learns the group's lease.
func (s *subscription) joinLease(ctx context.Context) error {
	return s.b.call(ctx, func(ctx context.Context) error {
		ms, err := groupLeaseScript.Run(ctx, s.b.client, []string{s.keys.lease}, s.cfg.Group, s.cfg.AckTimeout.Milliseconds()).Int64()
		if err == nil {
			s.noteLease(ms)
		}
		return err
	})
}
