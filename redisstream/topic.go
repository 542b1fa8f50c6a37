package redisstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/eventbus-go/bus/observer"
)

// topicState is the per-topic background work of a Backend: the promoter
// that keeps delayed nacks on hold until they are due, and (with
// RetainSettled) the trimmer. Exactly one of each runs per topic and
// Backend, while the topic has subscriptions. Fields other than the
// goroutine handles are guarded by Backend.mu.
type topicState struct {
	b     *Backend
	topic string
	keys  keys

	refs        int
	ackTimeouts map[time.Duration]int // of the live subscriptions
	obs         observer.Observer

	running bool
	cancel  context.CancelFunc
	kick    chan struct{}
	// nextDue is when the schedule's next message is due, in Unix ms (0:
	// none known).
	nextDue atomic.Int64
}

// holdBatch is how many holds one promoter script call visits.
const holdBatch = 256

func newTopicState(b *Backend, topic string, k keys) *topicState {
	return &topicState{b: b, topic: topic, keys: k, ackTimeouts: map[time.Duration]int{}, kick: make(chan struct{}, 1)}
}

func (t *topicState) addAckTimeout(d time.Duration) { t.ackTimeouts[d]++ }

func (t *topicState) removeAckTimeout(d time.Duration) {
	if t.ackTimeouts[d]--; t.ackTimeouts[d] <= 0 {
		delete(t.ackTimeouts, d)
	}
}

// tick returns the promoter period: a quarter of the shortest ack timeout
// of the live subscriptions, between 10ms and 1s. Called with Backend.mu.
func (t *topicState) tick() time.Duration {
	d := time.Second
	for at := range t.ackTimeouts {
		d = min(d, at/4)
	}
	return max(d, 10*time.Millisecond)
}

// start launches the background goroutines once. Called without
// Backend.mu.
func (t *topicState) start() {
	b := t.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if t.running || b.closed {
		return
	}
	t.running = true
	ctx, cancel := context.WithCancel(context.Background())
	t.cancel = cancel
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		t.runPromoter(ctx)
	}()
	if b.opts.Retention == RetainSettled {
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			t.runTrimmer(ctx)
		}()
	}
}

// stop ends the goroutines. Called with Backend.mu.
func (t *topicState) stop() {
	if t.cancel != nil {
		t.cancel()
	}
}

// wake makes the promoter run a pass now (after a nack with hold).
func (t *topicState) wake() {
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

func (t *topicState) currentTick() time.Duration {
	t.b.mu.Lock()
	defer t.b.mu.Unlock()
	return t.tick()
}

func (t *topicState) runPromoter(ctx context.Context) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	failing := false // report a failure once, not on every tick of an outage
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-t.kick:
		}
		err := t.pass(ctx, t.promote)
		if err != nil && ctx.Err() == nil && !failing {
			t.report(observer.ScopeNack, fmt.Errorf("redisstream: promote delayed nacks and scheduled messages of %q: %w", t.topic, err))
		}
		failing = err != nil
		timer.Reset(t.wait())
	}
}

// pass runs one pass of a background task, bounded by passTimeout; it
// returns at once when ctx (the task's) is cancelled, so stopping a topic
// never waits for I/O over a dead link.
func (t *topicState) pass(ctx context.Context, fn func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, passTimeout)
	defer cancel()
	return t.b.async(ctx, fn)
}

// promote runs one pass over the schedule and the hold ZSET.
func (t *topicState) promote(ctx context.Context) error {
	if err := t.promoteDue(ctx); err != nil {
		return err
	}
	off := 0
	for {
		res, err := holdScript.Run(ctx, t.b.client, []string{t.keys.stream, t.keys.hold, t.keys.held}, off, holdBatch).Int64Slice()
		if err != nil {
			return err
		}
		if len(res) != 2 {
			return fmt.Errorf("unexpected promoter reply %v", res)
		}
		visited, removed := int(res[0]), int(res[1])
		if visited < holdBatch {
			return nil
		}
		off += visited - removed
	}
}

// report sends an event to every subscription's observer of the topic; the
// topic's subscriptions share this state, so the first one's observer is
// used (the bus gives all of them the same observer).
func (t *topicState) report(scope observer.Scope, err error) {
	if t.obs != nil {
		t.obs.Observe(context.Background(), observer.Event{Scope: scope, Topic: t.topic, Err: err})
	}
}

func (t *topicState) runTrimmer(ctx context.Context) {
	ticker := time.NewTicker(t.b.opts.TrimInterval)
	defer ticker.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		err := t.pass(ctx, func(ctx context.Context) error {
			_, err := trimSettled(ctx, t.b.client, t.keys.stream)
			return err
		})
		if err != nil && ctx.Err() == nil && !failing {
			t.report(observer.ScopeReclaim, fmt.Errorf("redisstream: trim %q: %w", t.topic, err))
		}
		failing = err != nil
	}
}

// trimSettled trims the entries of stream that every group has settled:
// those below the oldest entry some group still needs, that is its oldest
// pending entry or the entry after its last delivered one. It frees whole
// stream nodes first (XTRIM MINID ~, at most trimLimit entries a call)
// and, once those reach the floor, deletes the settled entries of the
// node that holds it (an exact XTRIM MINID, which visits that one node).
// A stream without groups is not trimmed. It returns how many entries
// were removed.
func trimSettled(ctx context.Context, c redis.UniversalClient, stream string) (int64, error) {
	groups, err := c.XInfoGroups(ctx, stream).Result()
	if err != nil {
		if errors.Is(err, redis.Nil) || isNoSuchKey(err) {
			return 0, nil
		}
		return 0, err
	}
	if len(groups) == 0 {
		return 0, nil
	}
	pipe := c.Pipeline()
	pend := make([]*redis.XPendingCmd, len(groups))
	for i, g := range groups {
		if g.Pending > 0 {
			pend[i] = pipe.XPending(ctx, stream, g.Name)
		}
	}
	if pipe.Len() > 0 {
		if _, err := pipe.Exec(ctx); err != nil {
			return 0, err
		}
	}
	var floor string
	for i, g := range groups {
		need := nextID(g.LastDeliveredID)
		if pend[i] != nil {
			need = pend[i].Val().Lower
		}
		if floor == "" || lessID(need, floor) {
			floor = need
		}
	}
	if floor == "" || floor == "0-1" {
		return 0, nil
	}
	n, err := c.XTrimMinIDApprox(ctx, stream, floor, trimLimit).Result()
	if err != nil || n >= trimLimit {
		return n, err
	}
	m, err := c.XTrimMinID(ctx, stream, floor).Result()
	return n + m, err
}

func isNoSuchKey(err error) bool {
	return err != nil && (err.Error() == "ERR no such key")
}

// parseID splits a stream ID "ms-seq".
func parseID(id string) (ms, seq uint64, ok bool) {
	i := 0
	for i < len(id) && id[i] != '-' {
		i++
	}
	ms, err := strconv.ParseUint(id[:i], 10, 64)
	if err != nil {
		return 0, 0, false
	}
	if i < len(id) {
		if seq, err = strconv.ParseUint(id[i+1:], 10, 64); err != nil {
			return 0, 0, false
		}
	}
	return ms, seq, true
}

// lessID reports whether stream ID a sorts before b.
func lessID(a, b string) bool {
	am, as, _ := parseID(a)
	bm, bs, _ := parseID(b)
	return am < bm || am == bm && as < bs
}

// nextID returns the smallest stream ID after id.
func nextID(id string) string {
	ms, seq, ok := parseID(id)
	if !ok {
		return "0-1"
	}
	return strconv.FormatUint(ms, 10) + "-" + strconv.FormatUint(seq+1, 10)
}
