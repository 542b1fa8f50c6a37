package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/eventbus-go/bus/backend"
)

// receiveWait is how long Receive waits for a first message.
const receiveWait = time.Second

// A member fetches ahead at most this much (a record batch larger than
// that still comes whole): franz-go's default per partition, so that a
// busy partition takes few round trips, and a bound in all that keeps
// what a member holds before Receive asks for it to a few MiB.
const (
	fetchMaxBytes          = 8 << 20
	fetchMaxPartitionBytes = 1 << 20
)

// Subscription is one member of a Kafka consumer group, on a client of its
// own. Receive is called from one goroutine at a time; the other methods
// are safe for concurrent use.
type Subscription struct {
	b      *Backend
	topic  string // the bus topic
	kt     string // its Kafka topic
	cfg    backend.SubscribeConfig
	cl     *kgo.Client
	doneCh chan struct{}
	joined chan struct{} // closed at the member's first assignment
	loop   chan struct{} // closed when the commit loop returned
	kick   chan struct{} // wakes the commit loop after an ack
	// drained wakes a revoke that waits for the deliveries of its
	// partitions (see revoked) when one of them is settled or given back.
	drained chan struct{}

	commitMu  sync.Mutex // one commit at a time
	mu        sync.Mutex
	parts     map[int32]*part // the partitions this member owns
	parked    map[int32]*part // revoked in a rebalance, kept in case they come back
	ready     []*entry        // due for a delivery, before new records
	wake      context.CancelFunc
	changes   uint64 // state changes so far
	committed uint64 // changes covered by the last commit
	closed    bool
}

// part is the state of one owned partition.
type part struct {
	p       int32
	fetched bool
	next    int64 // the offset after the last record seen; -1 before one
	open    map[int64]*entry
	done    map[int64]bool // settled offsets (pruned below the commit)
	meta    partMeta       // what the commit metadata said at assignment
	// revoking: a rebalance takes the partition from this member; none
	// of its records is delivered any more (see revoked).
	revoking bool
	gone     bool // revoked or lost
}

// entry is one unsettled record of a partition.
type entry struct {
	pt       *part
	off      int64
	msg      backend.Message
	attempts int // deliveries counted so far
	state    int // stReady, stHeld, stDelivered
	cur      *delivery
	timer    *time.Timer
	due      int64 // Unix ms of a held entry
}

const (
	stReady = iota
	stHeld
	stDelivered
)

// delivery is the AckID of one delivery.
type delivery struct {
	s       *Subscription
	e       *entry
	msg     backend.Message
	expires time.Time
}

// Subscribe creates the topic when it is missing, sets a new group's
// position (the end of every partition for StartNewest, so that what is
// published once Subscribe returned is delivered) and returns a member of
// the group; it joins the group in the background.
func (b *Backend) Subscribe(ctx context.Context, topic string, cfg backend.SubscribeConfig) (backend.Subscription, error) {
	kt := kafkaTopic(topic)
	if _, err := b.ensureTopic(ctx, kt); err != nil {
		return nil, fmt.Errorf("kafka: subscribe %q: %w", topic, err)
	}
	if cfg.StartFrom == backend.StartNewest {
		if err := b.startAtEnd(ctx, kt, cfg.Group); err != nil {
			return nil, fmt.Errorf("kafka: subscribe %q group %q: %w", topic, cfg.Group, err)
		}
	}
	s := &Subscription{b: b, topic: topic, kt: kt, cfg: cfg, doneCh: make(chan struct{}), joined: make(chan struct{}), loop: make(chan struct{}), kick: make(chan struct{}, 1), drained: make(chan struct{}, 1), parts: map[int32]*part{}, parked: map[int32]*part{}}
	cl, err := kgo.NewClient(b.opts.clientOpts(
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(kt),
		kgo.DisableAutoCommit(),
		// Only the partitions that move are revoked, and handed over
		// once revoked returned (see revoked).
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.SessionTimeout(b.opts.SessionTimeout),
		kgo.HeartbeatInterval(b.opts.SessionTimeout/5),
		kgo.RebalanceTimeout(b.opts.SessionTimeout),
		kgo.FetchMaxWait(500*time.Millisecond),
		kgo.FetchMaxBytes(fetchMaxBytes),
		kgo.FetchMaxPartitionBytes(fetchMaxPartitionBytes),
		kgo.FetchIsolationLevel(kgo.ReadUncommitted()),
		kgo.OnPartitionsAssigned(s.assigned),
		kgo.OnOffsetsFetched(s.offsetsFetched),
		kgo.OnPartitionsRevoked(s.revoked),
		kgo.OnPartitionsLost(s.lost),
	)...)
	if err != nil {
		return nil, fmt.Errorf("kafka: subscribe %q: %w", topic, err)
	}
	s.cl = cl
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		cl.Close()
		return nil, fmt.Errorf("kafka: subscribe %q: %w", topic, backend.ErrClosed)
	}
	b.subs[s] = struct{}{}
	b.mu.Unlock()
	go s.commitLoop()
	if err := s.waitJoined(ctx); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("kafka: subscribe %q group %q: join: %w", topic, cfg.Group, err)
	}
	return s, nil
}

// waitJoined waits for the member's first assignment and, when the group
// has no more members than the topic has partitions, for its first
// partition (the cooperative balancer moves partitions to a new member
// in a second round): a group's members then share what is published
// once their Subscribe returned. A join that takes longer than two
// sessions goes on in the background.
func (s *Subscription) waitJoined(ctx context.Context) error {
	wait := time.NewTimer(2 * s.b.opts.SessionTimeout)
	defer wait.Stop()
	select {
	case <-s.joined:
	case <-wait.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
	if s.owned() > 0 || !s.expectsPartitions(ctx) {
		return nil
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for s.owned() == 0 {
		select {
		case <-tick.C:
		case <-wait.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// owned returns how many partitions the member owns.
func (s *Subscription) owned() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.parts)
}

// expectsPartitions reports whether the group has at most as many
// members as the topic has partitions.
func (s *Subscription) expectsPartitions(ctx context.Context) bool {
	groups, err := s.b.adm.DescribeGroups(ctx, s.cfg.Group)
	if err != nil {
		return false
	}
	td, err := s.b.adm.ListTopics(ctx, s.kt)
	if err != nil {
		return false
	}
	return len(groups[s.cfg.Group].Members) <= len(td[s.kt].Partitions)
}

// startAtEnd commits the end offsets of kt for group when the group has
// no offsets on it: the group is created at Subscribe. A group that has
// members refuses the commit; it exists, and keeps its position.
func (b *Backend) startAtEnd(ctx context.Context, kt, group string) error {
	var got kadm.OffsetResponses
	err := untilSettled(ctx, func() (err error) {
		got, err = b.adm.FetchOffsetsForTopics(ctx, group, kt)
		return err
	})
	if err != nil {
		return fmt.Errorf("fetch the group's offsets: %w", err)
	}
	for _, ps := range got[kt] {
		if ps.At >= 0 {
			return nil
		}
	}
	// A topic just created may not be hosted yet by every broker the
	// request reaches (UNKNOWN_TOPIC_OR_PARTITION, retriable).
	var ends kadm.ListedOffsets
	err = untilSettled(ctx, func() (err error) {
		ends, err = b.adm.ListEndOffsets(ctx, kt)
		if err == nil {
			err = ends.Error()
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("list end offsets: %w", err)
	}
	// The group's coordinator, too, may not know the new topic's ID yet
	// (UNKNOWN_TOPIC_ID, retriable).
	err = untilSettled(ctx, func() error {
		resp, err := b.adm.CommitOffsets(ctx, group, ends.Offsets())
		if err == nil {
			err = resp.Error()
		}
		if errors.Is(err, kerr.UnknownMemberID) || errors.Is(err, kerr.IllegalGeneration) || errors.Is(err, kerr.RebalanceInProgress) {
			return nil // the group has members: it exists and keeps its position
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("set the new group at the end: %w", err)
	}
	return nil
}

// untilSettled calls f again while it fails with an error Kafka calls
// retriable (a group coordinator still loading after a broker started),
// until ctx ends.
func untilSettled(ctx context.Context, f func() error) error {
	wait := 20 * time.Millisecond
	for {
		err := f()
		if err == nil || !kerr.IsRetriable(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
			wait = min(2*wait, 500*time.Millisecond)
		}
	}
}

// assigned starts the state of partitions given to this member. A
// partition that the rebalance revoked and gave back keeps its state, so
// its deliveries stay valid; one revoked and given to another member is
// dropped.
func (s *Subscription) assigned(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range m[s.kt] {
		if pt := s.parked[p]; pt != nil {
			s.parts[p] = pt
			delete(s.parked, p)
			s.resumeLocked(pt)
			continue
		}
		s.parts[p] = &part{p: p, next: -1, open: map[int64]*entry{}, done: map[int64]bool{}}
	}
	for p, pt := range s.parked {
		s.goneLocked(pt)
		delete(s.parked, p)
	}
	select {
	case <-s.joined:
	default:
		close(s.joined)
	}
}

// offsetsFetched reads the commit metadata of the partitions assigned.
func (s *Subscription) offsetsFetched(_ context.Context, _ *kgo.Client, resp *kmsg.OffsetFetchResponse) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	read := func(topic string, p int32, off int64, meta *string) {
		if topic != s.kt {
			return
		}
		pt := s.parts[p]
		if pt == nil || pt.fetched {
			return
		}
		pt.fetched = true
		if off >= 0 {
			pt.next = off
			if meta != nil {
				pt.meta = decodeMeta(off, *meta)
			}
		}
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			read(t.Topic, p.Partition, p.Offset, p.Metadata)
		}
	}
	for _, g := range resp.Groups {
		for _, t := range g.Topics {
			for _, p := range t.Partitions {
				read(t.Topic, p.Partition, p.Offset, p.Metadata)
			}
		}
	}
	return nil
}

// revoked hands over the partitions a rebalance takes from this member.
// The group's next owners get them only once it returns (the cooperative
// balancer revokes before it assigns; an eager one, when the member
// leaves, revokes every partition). It stops delivering their records,
// waits for their deliveries under way to be settled or given back
// (within drainWait: the bus runs the deliveries it holds, key by key),
// commits, and parks them: a partition the assignment gives back keeps
// its state, and its deliveries that outlived the wait stay valid; one
// given to another member is dropped, its unsettled records delivered
// again by the next owner from the committed offset, in log order.
func (s *Subscription) revoked(ctx context.Context, _ *kgo.Client, m map[string][]int32) {
	ps := m[s.kt]
	s.mu.Lock()
	for _, p := range ps {
		if pt := s.parts[p]; pt != nil {
			pt.revoking = true
		}
	}
	s.mu.Unlock()
	s.drain(ctx, ps)
	_ = s.commit(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range ps {
		if pt := s.parts[p]; pt != nil {
			s.parked[p] = pt
			delete(s.parts, p)
		}
	}
}

// drainWait is how long a revoke waits for the deliveries of its
// partitions: half the rebalance timeout (the session timeout), so that
// the commit after it ends within the rebalance timeout.
func (s *Subscription) drainWait() time.Duration { return s.b.opts.SessionTimeout / 2 }

// drain waits until no record of the partitions ps is delivered and
// unsettled, for at most drainWait, or until the subscription closes
// (Close gives back what is left) or ctx ends.
func (s *Subscription) drain(ctx context.Context, ps []int32) {
	if len(ps) == 0 {
		return
	}
	limit := time.NewTimer(s.drainWait())
	defer limit.Stop()
	for s.delivering(ps) {
		select {
		case <-s.drained:
		case <-limit.C:
			return
		case <-s.doneCh:
			return
		case <-ctx.Done():
			return
		}
	}
}

// delivering reports whether a record of the partitions ps is delivered
// and unsettled.
func (s *Subscription) delivering(ps []int32) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	for _, p := range ps {
		pt := s.parts[p]
		if pt == nil {
			continue
		}
		for _, e := range pt.open {
			if e.state == stDelivered {
				return true
			}
		}
	}
	return false
}

// leftLocked is called when e stops being delivered (settled, given back,
// held): it wakes a revoke that waits for e's partition.
func (s *Subscription) leftLocked(e *entry) {
	if !e.pt.revoking {
		return
	}
	select {
	case s.drained <- struct{}{}:
	default:
	}
}

// resumeLocked delivers again the records of a partition that a
// rebalance revoked and gave back: its ready records go back in the
// queue, in log order.
func (s *Subscription) resumeLocked(pt *part) {
	pt.revoking = false
	for _, e := range pt.open {
		if e.state == stReady {
			s.queueLocked(e)
		}
	}
}

// lost drops the partitions this member lost without a chance to commit.
func (s *Subscription) lost(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	s.drop(m[s.kt])
}

// drop forgets partitions: their deliveries become stale, and the
// partition's next owner delivers them again.
func (s *Subscription) drop(ps []int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range ps {
		for _, m := range []map[int32]*part{s.parts, s.parked} {
			if pt := m[p]; pt != nil {
				s.goneLocked(pt)
				delete(m, p)
			}
		}
	}
}

// goneLocked marks pt as no longer owned: its deliveries are stale.
func (s *Subscription) goneLocked(pt *part) {
	pt.gone = true
	for _, e := range pt.open {
		if e.timer != nil {
			e.timer.Stop()
		}
		e.cur = nil
	}
}

// Receive returns up to max deliveries: first those due again (leases
// that ran out, nacks, held records whose time came), then new records,
// waiting up to a second for the first.
func (s *Subscription) Receive(ctx context.Context, max int) ([]*backend.Message, error) {
	s.mu.Lock()
	if s.closed || s.b.isClosed() {
		s.mu.Unlock()
		return nil, fmt.Errorf("kafka: receive: %w", backend.ErrClosed)
	}
	out := s.takeReadyLocked(nil, max)
	var pctx context.Context
	var cancel context.CancelFunc
	if len(out) == 0 {
		pctx, cancel = context.WithTimeout(ctx, receiveWait)
		s.wake = cancel
	}
	s.mu.Unlock()
	if len(out) == max {
		return out, nil
	}
	var fetches kgo.Fetches
	if pctx == nil {
		//lint:ignore SA1012 a nil ctx asks PollRecords for what is buffered, without waiting
		fetches = s.cl.PollRecords(nil, max-len(out))
	} else {
		go func() {
			select {
			case <-s.doneCh:
				cancel()
			case <-pctx.Done():
			}
		}()
		fetches = s.cl.PollRecords(pctx, max-len(out))
		s.mu.Lock()
		s.wake = nil
		s.mu.Unlock()
		cancel()
	}
	var ferr error
	fetches.EachError(func(_ string, _ int32, err error) {
		if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) && ferr == nil {
			ferr = err
		}
	})
	s.mu.Lock()
	fetches.EachRecord(func(r *kgo.Record) {
		s.addLocked(r)
	})
	if ctx.Err() == nil {
		out = s.takeReadyLocked(out, max)
	}
	s.mu.Unlock()
	if len(out) > 0 {
		return out, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if s.isClosed() || errors.Is(ferr, kgo.ErrClientClosed) {
		return nil, fmt.Errorf("kafka: receive: %w", backend.ErrClosed)
	}
	if ferr != nil {
		return nil, fmt.Errorf("kafka: receive %q: %w", s.kt, ferr)
	}
	return nil, nil
}

// addLocked makes a fetched record an entry: ready, or held until the
// due time its commit metadata recorded. A record settled before (in the
// metadata) or already known is skipped.
func (s *Subscription) addLocked(r *kgo.Record) {
	pt := s.parts[r.Partition]
	if r.Topic != s.kt || pt == nil || pt.revoking {
		// A revoked partition's records are delivered by its next
		// owner, from the commit (its next offset is left as it is).
		return
	}
	if r.Offset >= pt.next {
		pt.next = r.Offset + 1
	}
	if pt.meta.done[r.Offset] || pt.done[r.Offset] || pt.open[r.Offset] != nil {
		if pt.meta.done[r.Offset] {
			pt.done[r.Offset] = true
		}
		return
	}
	e := &entry{pt: pt, off: r.Offset, attempts: pt.meta.attempts[r.Offset]}
	decode(r, &e.msg)
	pt.open[r.Offset] = e
	if due := pt.meta.due[r.Offset]; due > time.Now().UnixMilli() {
		s.holdLocked(e, due)
		return
	}
	e.state = stReady
	s.ready = append(s.ready, e)
}

// takeReadyLocked delivers ready entries until out holds max.
func (s *Subscription) takeReadyLocked(out []*backend.Message, max int) []*backend.Message {
	n := 0
	for n < len(s.ready) && len(out) < max {
		e := s.ready[n]
		n++
		if e.pt.gone || e.pt.revoking || e.state != stReady || e.pt.open[e.off] != e {
			continue
		}
		out = append(out, s.deliverLocked(e))
	}
	s.ready = append(s.ready[:0], s.ready[n:]...)
	return out
}

// commitInterval is how often the commit loop records deliveries (their
// attempt counts) at the broker.
const commitInterval = 250 * time.Millisecond

// commitLoop commits what changed since the last commit: at once after
// an ack, and every commitInterval the deliveries and their attempts, so
// that the group's figures and a new owner see them. Commits made while
// one is in flight are folded into the next. It returns when the
// subscription closes.
func (s *Subscription) commitLoop() {
	defer close(s.loop)
	tick := time.NewTicker(commitInterval)
	defer tick.Stop()
	for {
		select {
		case <-s.doneCh:
			return
		case <-tick.C:
		case <-s.kick:
		}
		s.mu.Lock()
		want := s.changes
		s.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), s.b.opts.RequestTimeout)
		go func() {
			select {
			case <-s.doneCh:
				cancel()
			case <-ctx.Done():
			}
		}()
		_ = s.commitUpTo(ctx, want)
		cancel()
	}
}

// deliverLocked hands e out: one attempt more, a lease of the ack timeout.
func (s *Subscription) deliverLocked(e *entry) *backend.Message {
	s.changes++
	e.attempts++
	d := &delivery{s: s, e: e, msg: e.msg, expires: time.Now().Add(s.cfg.AckTimeout)}
	d.msg.Attempt = e.attempts
	d.msg.AckID = d
	e.cur, e.state = d, stDelivered
	e.timer = time.AfterFunc(s.cfg.AckTimeout, func() { s.expire(d) })
	return &d.msg
}

// expire makes an unsettled delivery ready again when its lease ran out.
func (s *Subscription) expire(d *delivery) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := d.e
	if e.cur != d || e.state != stDelivered || e.pt.gone {
		return
	}
	if left := time.Until(d.expires); left > 0 { // extended meanwhile
		e.timer.Reset(left)
		return
	}
	s.readyLocked(e)
}

// readyLocked queues e for the next Receive and wakes a waiting one.
func (s *Subscription) readyLocked(e *entry) {
	if e.timer != nil {
		e.timer.Stop()
	}
	if e.state == stDelivered {
		s.leftLocked(e)
	}
	e.cur, e.state = nil, stReady
	s.queueLocked(e)
	if s.wake != nil {
		s.wake()
	}
}

// queueLocked puts e in the ready queue ahead of the ready records of
// its partition that come after it in the log, so that a record given
// back or whose lease ran out goes out before the later records of its
// partition not yet delivered.
func (s *Subscription) queueLocked(e *entry) {
	i := slices.IndexFunc(s.ready, func(o *entry) bool { return o.pt == e.pt && o.off > e.off })
	if i < 0 {
		s.ready = append(s.ready, e)
		return
	}
	s.ready = slices.Insert(s.ready, i, e)
}

// holdLocked keeps e until due (Unix ms), then makes it ready.
func (s *Subscription) holdLocked(e *entry, due int64) {
	if e.timer != nil {
		e.timer.Stop()
	}
	if e.state == stDelivered {
		s.leftLocked(e)
	}
	e.cur, e.state, e.due = nil, stHeld, due
	wait := time.Until(time.UnixMilli(due))
	e.timer = time.AfterFunc(wait, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if e.state == stHeld && !e.pt.gone && e.pt.open[e.off] == e {
			s.readyLocked(e)
		}
	})
}

// current returns d's entry when d is its live delivery.
func (s *Subscription) currentLocked(d *delivery) *entry {
	if d == nil || d.s != s || d.e.cur != d || d.e.state != stDelivered || d.e.pt.gone {
		return nil
	}
	return d.e
}

// settleLocked removes e from its partition's unsettled records.
func (s *Subscription) settleLocked(e *entry) {
	if e.timer != nil {
		e.timer.Stop()
	}
	e.cur = nil
	delete(e.pt.open, e.off)
	e.pt.done[e.off] = true
	s.changes++
	s.leftLocked(e)
}

// Ack settles the deliveries and wakes the commit loop, which commits
// them at once (acks that come while a commit is in flight go in the
// next one); Subscription.Close commits what is left. An id whose lease
// ran out settles its record when this member still holds it unsettled.
func (s *Subscription) Ack(ctx context.Context, ids []backend.AckID) error {
	s.mu.Lock()
	for _, id := range ids {
		d, ok := id.(*delivery)
		if !ok || d.s != s {
			continue
		}
		e := d.e
		if !e.pt.gone && e.pt.open[e.off] == e {
			s.settleLocked(e)
		}
	}
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
	return nil
}

// Nack gives the delivery back: at once, or held for delay, with the
// attempt counted.
func (s *Subscription) Nack(ctx context.Context, id backend.AckID, delay time.Duration) error {
	return s.giveBack(ctx, "nack", id, 0, delay)
}

// Release gives the delivery back at once without counting an attempt.
func (s *Subscription) Release(ctx context.Context, id backend.AckID) error {
	return s.giveBack(ctx, "release", id, 1, 0)
}

// Snooze gives the delivery back after delay without counting an
// attempt.
func (s *Subscription) Snooze(ctx context.Context, id backend.AckID, delay time.Duration) error {
	return s.giveBack(ctx, "snooze", id, 1, delay)
}

// giveBack makes a live delivery ready again (delay 0) or holds it for
// delay, uncounting uncount attempts, and commits, so that the due time
// and the attempt count are at the broker.
func (s *Subscription) giveBack(ctx context.Context, op string, id backend.AckID, uncount int, delay time.Duration) error {
	d, _ := id.(*delivery)
	s.mu.Lock()
	e := s.currentLocked(d)
	if e == nil {
		s.mu.Unlock()
		return fmt.Errorf("kafka: %s: %w", op, backend.ErrStale)
	}
	e.attempts -= uncount
	if delay > 0 {
		s.holdLocked(e, ceilMilli(time.Now().Add(min(delay, backend.MaxDelay))))
	} else {
		s.readyLocked(e)
	}
	s.changes++
	want := s.changes
	s.mu.Unlock()
	if err := s.commitUpTo(ctx, want); err != nil {
		return fmt.Errorf("kafka: %s %q: %w", op, d.msg.ID, err)
	}
	return nil
}

// Extend restarts the delivery's lease.
func (s *Subscription) Extend(_ context.Context, id backend.AckID) error {
	d, _ := id.(*delivery)
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.currentLocked(d)
	if e == nil {
		return fmt.Errorf("kafka: extend: %w", backend.ErrStale)
	}
	d.expires = time.Now().Add(s.cfg.AckTimeout)
	e.timer.Reset(s.cfg.AckTimeout)
	return nil
}

// commitUpTo commits unless a commit since change want already covered
// it.
func (s *Subscription) commitUpTo(ctx context.Context, want uint64) error {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	s.mu.Lock()
	covered := s.committed >= want
	s.mu.Unlock()
	if covered {
		return nil
	}
	return s.commitLocked(ctx)
}

// commit commits every owned partition.
func (s *Subscription) commit(ctx context.Context) error {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	return s.commitLocked(ctx)
}

// commitLocked commits, for each owned partition whose position is known,
// its lowest unsettled offset (or the next one when none is) with the
// metadata of what lies beyond. commitMu is held.
func (s *Subscription) commitLocked(ctx context.Context) error {
	s.mu.Lock()
	seen := s.changes
	offsets := map[int32]kgo.EpochOffset{}
	metas := map[int32]string{}
	now := time.Now().UnixMilli()
	for p, pt := range s.parts {
		if pt.next < 0 {
			continue
		}
		c := pt.next
		for off := range pt.open {
			c = min(c, off)
		}
		for off := range pt.done {
			if off < c {
				delete(pt.done, off)
			}
		}
		due := map[int64]int64{}
		attempts := map[int64]int{}
		for off, e := range pt.open {
			if e.state == stHeld && e.due > now {
				due[off] = e.due
			}
			if e.attempts > 0 {
				attempts[off] = e.attempts
			}
		}
		offsets[p] = kgo.EpochOffset{Epoch: -1, Offset: c}
		metas[p] = encodeMeta(c, pt.done, due, attempts)
	}
	s.mu.Unlock()
	if len(offsets) == 0 {
		return nil
	}
	cctx := kgo.PreCommitFnContext(ctx, func(req *kmsg.OffsetCommitRequest) error {
		for i := range req.Topics {
			for j := range req.Topics[i].Partitions {
				p := &req.Topics[i].Partitions[j]
				if m, ok := metas[p.Partition]; ok && req.Topics[i].Topic == s.kt {
					p.Metadata = &m
				}
			}
		}
		return nil
	})
	var cerr error
	s.cl.CommitOffsetsSync(cctx, map[string]map[int32]kgo.EpochOffset{s.kt: offsets}, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			cerr = err
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil && cerr == nil {
					cerr = err
				}
			}
		}
	})
	if cerr != nil {
		return fmt.Errorf("commit: %w", cerr)
	}
	s.mu.Lock()
	if seen > s.committed {
		s.committed = seen
	}
	s.mu.Unlock()
	return nil
}

// isClosed reports whether the subscription or its backend is closed.
func (s *Subscription) isClosed() bool {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	return closed || s.b.isClosed()
}

func (b *Backend) isClosed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed
}

// Close stops the member: its unsettled deliveries go back to the group
// without counting an attempt (recorded in a last commit, within half of
// Options.CloseTimeout), then it leaves the group, within about
// Options.CloseTimeout in all.
func (s *Subscription) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.doneCh)
	s.mu.Unlock()
	<-s.loop
	s.mu.Lock()
	for _, pt := range s.parts {
		for _, e := range pt.open {
			if e.state == stDelivered {
				e.attempts--
				s.changes++
			}
			if e.timer != nil {
				e.timer.Stop()
			}
		}
	}
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), s.b.opts.CloseTimeout)
	defer cancel()
	cctx, ccancel := context.WithTimeout(ctx, s.b.opts.CloseTimeout/2) // the rest is for leaving
	_ = s.commit(cctx)
	ccancel()
	s.mu.Lock()
	for _, m := range []map[int32]*part{s.parts, s.parked} {
		for _, pt := range m {
			s.goneLocked(pt)
		}
	}
	s.mu.Unlock()
	_ = s.cl.LeaveGroupContext(ctx)
	s.cl.Close()
	s.b.mu.Lock()
	delete(s.b.subs, s)
	s.b.mu.Unlock()
	return nil
}

// ceilMilli is t in Unix milliseconds, rounded up: a due time never
// comes before t.
func ceilMilli(t time.Time) int64 {
	return (t.UnixNano() + int64(time.Millisecond) - 1) / int64(time.Millisecond)
}

// Idle reports whether the member, once it joined, owns no partition of
// the topic (backend.Idler): the group has more members than the topic
// has partitions.
func (s *Subscription) Idle() bool {
	select {
	case <-s.joined:
	default:
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.parts) == 0
}
