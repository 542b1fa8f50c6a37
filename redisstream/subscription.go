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
	dec     decodeBuf // Receive's scratch space

	closed    atomic.Bool
	closeOnce sync.Once

	// leaseMs is the group's lease as this member last read it: the
	// longest ack timeout of the group's members (groupLeaseScript),
	// never shorter than its own. Nack and Release set idle times by it.
	leaseMs atomic.Int64

	linger linger // whether the next read waits Options.ReadLinger

	lost groupLoss // when the group last vanished, and the backoff

	// handed is the highest entry ID this subscription handed out;
	// recovering: a read's reply was lost, so the next Receive takes back
	// what it may have taken first (recover.go). Receive's goroutine
	// only (see setRecovering).
	handed     string
	recovering bool
	// lostFrom is where what lost reads took starts (handedFrom) while
	// recovering is set, nil otherwise: what Close gives back
	// (giveBackLost). noFence: the server refused CLIENT KILL.
	lostFrom atomic.Pointer[string]
	noFence  atomic.Bool
	// touched is when Receive last told Redis the consumer is alive
	// (touch). Receive's goroutine only.
	touched time.Time
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
	s.touch(ctx)
	now, err := s.linger.beforeRead(ctx, s.b.opts.ReadLinger)
	if err != nil {
		return nil, err
	}
	args := s.readArgs
	args.Count = int64(max)
	args.Block = s.blockFor(now)
	rctx, done := s.wakeable(ctx, now, args.Block)
	lost := s.reader.lostTotal()
	rr := s.reader.read(rctx, &args)
	woken := done()
	if s.reader.lostTotal() != lost {
		// The read was given up on: it may have taken entries.
		s.setRecovering(true)
	}
	defer s.reader.recycle(rr)
	s.linger.read(max)
	if err := rr.err; err != nil {
		if woken && errors.Is(err, context.Canceled) {
			// A reclaim is due: the next Receive runs it.
			return s.none()
		}
		return nil, s.readErr(ctx, err)
	}
	if rr.raw != nil {
		return s.decodeRaw(ctx, rr.raw)
	}
	if len(rr.res) == 0 {
		return s.none()
	}
	return s.decodeEntries(ctx, rr.res[0].Messages), nil
}

// touchEvery is how often a subscription tells Redis that its consumer
// is alive while it reads (touch): well within liveConsumerIdle.
var touchEvery = 10 * time.Second

// touchID is past every entry ID: a history read from it returns nothing.
const touchID = "18446744073709551615-0"

// touch marks the consumer as seen (XINFO CONSUMERS idle 0) once every
// touchEvery: a blocked XREADGROUP that finds nothing does not, before
// Redis 7.2, so a live member of a quiet topic would look like one whose
// process died (Groups does not count those). The read is of the
// consumer's own pending entries after touchID, of which there are none:
// it takes no entry and changes no delivery count or idle time. A
// failure is left to the read that follows.
func (s *subscription) touch(ctx context.Context) {
	now := time.Now()
	if now.Sub(s.touched) < touchEvery {
		return
	}
	s.touched = now
	_ = s.b.call(ctx, func(ctx context.Context) error {
		err := s.b.client.XReadGroup(ctx, &redis.XReadGroupArgs{Group: s.cfg.Group, Consumer: s.consumer,
			Streams: []string{s.keys.stream, touchID}, Count: 1, Block: -1}).Err()
		if errors.Is(err, redis.Nil) {
			return nil
		}
		return err
	})
}

// none is what a Receive whose read found nothing returns: nothing, or
// ErrClosed when the subscription or the backend was closed meanwhile.
func (s *subscription) none() ([]*backend.Message, error) {
	if s.ended() {
		return nil, s.errf("receive", backend.ErrClosed)
	}
	return nil, nil
}

// readErr is what Receive returns for a read that failed.
func (s *subscription) readErr(ctx context.Context, err error) error {
	switch {
	case errors.Is(err, redis.Nil) && !s.ended():
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

// Close stops the subscription and removes its consumer from the group if
// it owns no pending entry. Unsettled entries stay pending and are
// reclaimed by other members after their lease, but for what reads it
// gave up on took and no Receive took back yet, which it gives back at
// once (giveBackLost); when that fails, Close returns the error (the bus
// then lets a key-ordered group's lock lapse, so that the next holder
// waits for what is left). Close has no ctx: the give-back is bounded by
// giveBackTimeout (1s) and runs only after a lost read, the removal by
// closeTimeout (100ms), after which the consumer is left in the group.
func (s *subscription) Close() error {
	var err error
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		s.reader.close()
		lostErr := s.giveBackLost()
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
		if lostErr != nil {
			err = errors.Join(s.errf("close", lostErr), err)
		}
		s.b.release(s.topic, s.cfg)
	})
	return err
}
