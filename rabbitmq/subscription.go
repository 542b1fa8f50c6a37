package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/observer"
)

// receiveWait is how long Receive waits for a first message.
const receiveWait = time.Second

// staleAckKeep is how long an ack of a delivery whose lease ran out is
// remembered, so that the message's next delivery to this member is
// settled on arrival.
const staleAckKeep = 10 * time.Minute

// Subscription is one member of a group: a consumer on the group's quorum
// queue, on a channel of its own. Receive is called from one goroutine at
// a time; the other methods are safe for concurrent use.
type Subscription struct {
	b      *Backend
	topic  string
	queue  string
	cfg    backend.SubscribeConfig
	tag    string // consumer tag
	lockQ  string // the group lock's queue
	notesQ string // the group's release notes queue
	doneCh chan struct{}

	mu         sync.Mutex
	ch         *amqp.Channel // nil until Receive opens it, and after it died
	gen        uint64        // channel generation: a delivery tag is valid in its own
	deliveries <-chan amqp.Delivery
	active     map[*delivery]struct{}
	byID       map[string]*delivery // the active delivery of each message ID
	staleAcked map[string]time.Time
	closed     bool
	moves      sync.WaitGroup // moves in progress; Close waits for them
	// locked: the subscription fetched while a holder of this backend
	// held the group lock (a key-ordered member): it gives back to the
	// head of the queue with release notes (see giveBackToHead).
	locked bool
	take   uint64 // the take of the lock whose notes were read
	// receiving: a Receive is under way (it reads deliveries).
	receiving bool
	// cancelled: the broker cancelled the consumer on a live channel,
	// as it does when the group's queue is deleted; consume no longer
	// declares the queue.
	cancelled bool
	notes     releaseNotes // of the messages not settled here yet

	out []*backend.Message // returned by the last Receive
}

// delivery is the AckID of one delivery.
type delivery struct {
	s       *Subscription
	gen     uint64
	tag     uint64
	msg     backend.Message
	base    int
	count   int // x-delivery-count
	timer   *time.Timer
	expires time.Time
	state   int  // stActive, stReleased, stSettled, stStale
	moving  bool // a copy is being stored (move): the lease does not give it back meanwhile
}

const (
	stActive = iota
	// stReleased: released by a key-ordered member, and left unsettled
	// on its channel, which gives it back to the head of the queue when
	// it closes (see releaseToHead).
	stReleased
	stSettled
	stStale
)

var consumerSeq atomic.Int64

// Subscribe declares the topic's exchange and the group's quorum queue
// (bound to it) and returns a member of the group. The consumer starts
// with the first Receive.
func (b *Backend) Subscribe(ctx context.Context, topic string, cfg backend.SubscribeConfig) (backend.Subscription, error) {
	if cfg.StartFrom == backend.StartOldest {
		return nil, backend.Permanent(fmt.Errorf("rabbitmq: subscribe %q: %w: a group starts with the messages published after it was created", topic, backend.ErrUnsupported))
	}
	q, err := b.declareGroup(ctx, topic, cfg.Group)
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: subscribe %q group %q: %w", topic, cfg.Group, err)
	}
	host, _ := os.Hostname()
	s := &Subscription{
		b: b, topic: topic, queue: q, cfg: cfg,
		lockQ:      b.lockName(topic, cfg.Group),
		notesQ:     b.notesName(topic, cfg.Group),
		notes:      releaseNotes{},
		tag:        "bus-" + host + "-" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(consumerSeq.Add(1), 10),
		doneCh:     make(chan struct{}),
		active:     map[*delivery]struct{}{},
		byID:       map[string]*delivery{},
		staleAcked: map[string]time.Time{},
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, fmt.Errorf("rabbitmq: subscribe %q: %w", topic, backend.ErrClosed)
	}
	b.subs[s] = struct{}{}
	return s, nil
}

// consume returns the deliveries of the live consumer, opening its
// channel (prefetch cfg.MaxInFlight) when there is none. On the new
// channel it declares the topic's exchange, the group's queue and its
// binding again before it consumes, in the round trip of basic.qos: a
// node that crashed may have come back without them.
func (s *Subscription) consume(ctx context.Context) (<-chan amqp.Delivery, uint64, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, 0, fmt.Errorf("rabbitmq: receive: %w", backend.ErrClosed)
	}
	if s.ch != nil {
		defer s.mu.Unlock()
		return s.deliveries, s.gen, nil
	}
	redeclare := !s.cancelled
	s.mu.Unlock()
	ch, err := s.b.sub.channel(ctx)
	if err != nil {
		return nil, 0, err
	}
	var dels <-chan amqp.Delivery
	err = callCtx(ctx, ch, func() error {
		if redeclare {
			if err := declareGroupOn(ch, s.b.exchangeName(s.topic), s.queue, true); err != nil {
				return err
			}
		}
		if err := ch.Qos(max(s.cfg.MaxInFlight, 1), 0, false); err != nil {
			return err
		}
		var err error
		dels, err = ch.Consume(s.queue, s.tag, false, false, false, false, nil)
		return err
	})
	if err != nil {
		go closeChannel(ch, s.b.opts.CloseTimeout)
		return nil, 0, fmt.Errorf("rabbitmq: consume %q: %w", s.queue, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		go closeChannel(ch, s.b.opts.CloseTimeout)
		return nil, 0, fmt.Errorf("rabbitmq: receive: %w", backend.ErrClosed)
	}
	s.ch, s.deliveries = ch, dels
	s.gen++
	return dels, s.gen, nil
}

// Receive returns up to max deliveries: it waits up to a second for the
// first, then takes what has arrived without waiting.
func (s *Subscription) Receive(ctx context.Context, max int) ([]*backend.Message, error) {
	s.mu.Lock()
	s.receiving = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.receiving = false
		s.mu.Unlock()
	}()
	if err := s.takeNotes(ctx); err != nil {
		return nil, fmt.Errorf("rabbitmq: receive %q: %w", s.queue, err)
	}
	dels, gen, err := s.consume(ctx)
	if err != nil {
		if s.isClosed() && !errors.Is(err, backend.ErrClosed) {
			return nil, fmt.Errorf("rabbitmq: receive: %w", backend.ErrClosed)
		}
		return nil, err
	}
	s.out = s.out[:0]
	wait := time.NewTimer(receiveWait)
	defer wait.Stop()
	for len(s.out) < max {
		var d amqp.Delivery
		var ok bool
		if len(s.out) == 0 {
			select {
			case d, ok = <-dels:
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-s.doneCh:
				return nil, fmt.Errorf("rabbitmq: receive: %w", backend.ErrClosed)
			case <-wait.C:
				return nil, nil
			}
		} else {
			select {
			case d, ok = <-dels:
			default:
				return s.out, nil
			}
		}
		if !ok {
			s.channelDied(gen)
			if len(s.out) > 0 {
				return s.out, nil
			}
			if s.isClosed() {
				return nil, fmt.Errorf("rabbitmq: receive: %w", backend.ErrClosed)
			}
			return nil, fmt.Errorf("rabbitmq: receive %q: the channel closed", s.queue)
		}
		if m := s.accept(ctx, gen, &d); m != nil {
			s.out = append(s.out, m)
		}
	}
	return s.out, nil
}

// accept turns a delivery into a message to return, or settles it here:
// a malformed entry, a held copy not yet due, a message whose earlier
// delivery this member acked after its lease ran out.
func (s *Subscription) accept(ctx context.Context, gen uint64, d *amqp.Delivery) *backend.Message {
	dec, err := decode(d)
	if err != nil {
		s.malformed(ctx, d, err)
		return nil
	}
	if dec.due > time.Now().UnixMilli() {
		if err := s.b.storeCopy(ctx, s.queue, &dec.msg, dec.base, dec.due); err != nil {
			_ = settle(d, func() error { return d.Nack(false, true) })
			return nil
		}
		_ = settle(d, func() error { return d.Ack(false) })
		return nil
	}
	s.mu.Lock()
	if _, ok := s.staleAcked[dec.msg.ID]; ok {
		delete(s.staleAcked, dec.msg.ID)
		s.mu.Unlock()
		_ = settle(d, func() error { return d.Ack(false) })
		return nil
	}
	dl := &delivery{s: s, gen: gen, tag: d.DeliveryTag, msg: dec.msg, base: dec.base, count: dec.count, expires: time.Now().Add(s.cfg.AckTimeout)}
	dl.msg.AckID = dl
	dl.msg.Attempt -= s.notes.releasesAt(dl.msg.ID, dl.count)
	if old := s.byID[dl.msg.ID]; old != nil && old.state == stActive {
		// A duplicate of a message this member holds: both stay
		// leased; the newer one is the one found by ID.
		_ = old
	}
	s.active[dl] = struct{}{}
	s.byID[dl.msg.ID] = dl
	dl.timer = time.AfterFunc(s.cfg.AckTimeout, dl.expire)
	s.mu.Unlock()
	return &dl.msg
}

// malformed settles an entry the backend cannot decode: a copy goes to
// the dead-letter topic when there is one, then the entry is acked.
func (s *Subscription) malformed(ctx context.Context, d *amqp.Delivery, err error) {
	id := d.MessageId
	if id == "" {
		id = "amqp-" + strconv.FormatUint(d.DeliveryTag, 10)
	}
	s.cfg.Observer.Observe(ctx, observer.Event{Scope: observer.ScopeDecode, Topic: s.topic, Group: s.cfg.Group, MessageID: id,
		Err: fmt.Errorf("rabbitmq: entry %q of queue %q: %w", id, s.queue, err)})
	if s.cfg.DeadLetterTopic != "" {
		m := &backend.Message{ID: id, Payload: d.Body, PublishedAt: time.Now()}
		dl := backend.NewDeadLetter(m, backend.DeadLetterInfo{Topic: s.topic, Group: s.cfg.Group, Attempt: 1, Code: backend.CodeMalformed, Reason: err.Error()})
		if perr := s.b.Publish(ctx, s.cfg.DeadLetterTopic, []*backend.Message{dl}); perr != nil {
			_ = settle(d, func() error { return d.Nack(false, true) })
			return
		}
	}
	_ = settle(d, func() error { return d.Ack(false) })
}

// expire gives an unsettled delivery back to the queue when its lease
// ran out: the broker counts it as a delivery. A key-ordered member
// closes its channel instead (see resetChannel), so that the delivery
// comes back at the head of the queue, before what the broker pushed it
// since.
func (d *delivery) expire() {
	s := d.s
	s.mu.Lock()
	if d.state != stActive && d.state != stReleased {
		s.mu.Unlock()
		return
	}
	if d.moving {
		d.timer.Reset(s.cfg.AckTimeout) // the move settles it, or gives it back when it fails
		s.mu.Unlock()
		return
	}
	if left := time.Until(d.expires); left > 0 && d.state == stActive { // extended meanwhile
		d.timer.Reset(left)
		s.mu.Unlock()
		return
	}
	if s.locked {
		s.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), s.b.opts.CloseTimeout)
		defer cancel()
		s.resetChannel(ctx, d.gen)
		return
	}
	ch := s.staleLocked(d)
	s.mu.Unlock()
	if ch != nil {
		_ = sendOn(ch, func() error { return ch.Nack(d.tag, false, true) })
	}
}

// staleLocked marks d stale and returns the channel its tag is valid on,
// or nil.
func (s *Subscription) staleLocked(d *delivery) *amqp.Channel {
	d.state = stStale
	s.forgetLocked(d)
	if d.gen == s.gen && s.ch != nil {
		return s.ch
	}
	return nil
}

func (s *Subscription) forgetLocked(d *delivery) {
	delete(s.active, d)
	if s.byID[d.msg.ID] == d {
		delete(s.byID, d.msg.ID)
	}
	if d.timer != nil {
		d.timer.Stop()
	}
}

// channelDied marks every delivery of channel generation gen stale: the
// broker gave them back when the channel closed.
func (s *Subscription) channelDied(gen uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gen != gen || s.ch == nil {
		return
	}
	ch := s.ch
	s.ch, s.deliveries = nil, nil
	if !ch.IsClosed() {
		// The deliveries ended on a live channel: the broker cancelled
		// the consumer (the channel closes first when it is lost).
		s.cancelled = true
	}
	for d := range s.active {
		if d.gen == gen {
			d.state = stStale
			s.forgetLocked(d)
		}
	}
	go closeChannel(ch, s.b.opts.CloseTimeout)
}

// take settles d (active) for a settlement and returns the channel to
// settle its tag on (nil: the channel died; the broker gave it back).
func (s *Subscription) takeLocked(d *delivery) *amqp.Channel {
	d.state = stSettled
	s.forgetLocked(d)
	if d.gen == s.gen {
		return s.ch
	}
	return nil
}

// Ack settles the deliveries. An id whose lease ran out settles the
// message's newer delivery when this member holds it, or when it comes
// to this member within ten minutes.
func (s *Subscription) Ack(ctx context.Context, ids []backend.AckID) error {
	type ack struct {
		ch  *amqp.Channel
		tag uint64
	}
	acks := make([]ack, 0, len(ids))
	s.mu.Lock()
	now := time.Now()
	for _, id := range ids {
		d, ok := id.(*delivery)
		if !ok || d.s != s {
			continue
		}
		if len(s.notes) > 0 {
			delete(s.notes, d.msg.ID)
		}
		switch d.state {
		case stActive:
			if ch := s.takeLocked(d); ch != nil {
				acks = append(acks, ack{ch, d.tag})
			}
		case stStale:
			if cur := s.byID[d.msg.ID]; cur != nil && cur.state == stActive {
				if ch := s.takeLocked(cur); ch != nil {
					acks = append(acks, ack{ch, cur.tag})
				}
			} else {
				s.staleAcked[d.msg.ID] = now
			}
			d.state = stSettled
		}
	}
	if len(s.staleAcked) > 0 {
		for id, at := range s.staleAcked {
			if now.Sub(at) > staleAckKeep {
				delete(s.staleAcked, id)
			}
		}
	}
	s.mu.Unlock()
	var errs []error
	if len(acks) > 1 {
		defer s.b.sub.cork()() // one write for the acks
	}
	for _, a := range acks {
		if err := sendOn(a.ch, func() error { return a.ch.Ack(a.tag, false) }); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("rabbitmq: ack: %w", errors.Join(errs...))
	}
	return nil
}

// Nack gives the delivery back: at once through the broker (which counts
// it), or after delay as a confirmed copy in a hold queue that carries the
// attempt count, then an ack of the original.
func (s *Subscription) Nack(ctx context.Context, id backend.AckID, delay time.Duration) error {
	d, _ := id.(*delivery)
	if d == nil {
		return fmt.Errorf("rabbitmq: nack: %w", backend.ErrStale)
	}
	if delay <= 0 {
		s.mu.Lock()
		if d.s != s || d.state != stActive || d.gen != s.gen {
			s.mu.Unlock()
			return fmt.Errorf("rabbitmq: nack %q: %w", d.msg.ID, backend.ErrStale)
		}
		ch := s.takeLocked(d)
		s.mu.Unlock()
		if ch == nil {
			return fmt.Errorf("rabbitmq: nack %q: %w", d.msg.ID, backend.ErrStale)
		}
		if err := sendOn(ch, func() error { return ch.Nack(d.tag, false, true) }); err != nil {
			return fmt.Errorf("rabbitmq: nack %q: %w", d.msg.ID, err)
		}
		return nil
	}
	return s.move(ctx, d, "nack", d.msg.Attempt, delay)
}

// Release gives the delivery back at once without counting an attempt: a
// confirmed copy at the tail of the group's queue, then an ack. A
// key-ordered member's goes back to the head when its channel closes
// (see releaseToHead).
func (s *Subscription) Release(ctx context.Context, id backend.AckID) error {
	d, _ := id.(*delivery)
	if d == nil {
		return fmt.Errorf("rabbitmq: release: %w", backend.ErrStale)
	}
	s.mu.Lock()
	locked := s.locked
	s.mu.Unlock()
	if locked {
		return s.releaseToHead(d)
	}
	return s.move(ctx, d, "release", d.msg.Attempt-1, 0)
}

// Snooze gives the delivery back after delay without counting an
// attempt, as Nack with a delay does but for the count.
func (s *Subscription) Snooze(ctx context.Context, id backend.AckID, delay time.Duration) error {
	d, _ := id.(*delivery)
	if d == nil {
		return fmt.Errorf("rabbitmq: snooze: %w", backend.ErrStale)
	}
	return s.move(ctx, d, "snooze", d.msg.Attempt-1, delay)
}

// move stores a confirmed copy of d with base attempts before it, due
// after delay, and then acks d. A crash between the two leaves both: the
// message may come twice, never not at all.
func (s *Subscription) move(ctx context.Context, d *delivery, op string, base int, delay time.Duration) error {
	s.mu.Lock()
	if d.s != s || d.state != stActive || d.gen != s.gen || d.moving {
		s.mu.Unlock()
		return fmt.Errorf("rabbitmq: %s %q: %w", op, d.msg.ID, backend.ErrStale)
	}
	d.moving = true
	s.moves.Add(1)
	s.mu.Unlock()
	defer s.moves.Done()
	var due int64
	if delay > 0 {
		due = ceilMilli(time.Now().Add(min(delay, backend.MaxDelay)))
	}
	err := s.b.storeCopy(ctx, s.queue, &d.msg, base, due)
	s.mu.Lock()
	d.moving = false
	var ch *amqp.Channel
	if err == nil && d.state == stActive {
		ch = s.takeLocked(d)
		delete(s.notes, d.msg.ID) // the copy carries the attempts
	}
	s.mu.Unlock()
	if err != nil {
		return fmt.Errorf("rabbitmq: %s %q: %w", op, d.msg.ID, err)
	}
	if ch != nil {
		if err := sendOn(ch, func() error { return ch.Ack(d.tag, false) }); err != nil {
			return fmt.Errorf("rabbitmq: %s %q: ack the original: %w", op, d.msg.ID, err)
		}
	}
	return nil
}

// Extend restarts the delivery's lease.
func (s *Subscription) Extend(_ context.Context, id backend.AckID) error {
	d, _ := id.(*delivery)
	if d == nil {
		return fmt.Errorf("rabbitmq: extend: %w", backend.ErrStale)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if d.s != s || d.state != stActive || d.gen != s.gen {
		return fmt.Errorf("rabbitmq: extend %q: %w", d.msg.ID, backend.ErrStale)
	}
	d.expires = time.Now().Add(s.cfg.AckTimeout)
	d.timer.Reset(s.cfg.AckTimeout)
	return nil
}

// isLocked reports whether the subscription fetched as a holder of the
// group lock.
func (s *Subscription) isLocked() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.locked
}

// isClosed reports whether the subscription or its backend is closed.
func (s *Subscription) isClosed() bool {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	return closed || s.b.closed
}

// Close cancels the consumer: it waits for the moves in progress
// (Release, Snooze, Nack with a delay), gives each delivery still
// unsettled back to the group (a confirmed copy, then an ack; a
// key-ordered member's go back to the head of the queue with release
// notes, see giveBackToHead) and closes the channel: those the broker
// pushed and Receive did not return, and those released, without
// counting an attempt, those Receive returned and that are neither
// settled nor released (their handler may have run) counting one,
// all within about Options.CloseTimeout. A delivery it cannot give back
// so is given back by the broker when the channel closes, and that
// counts.
func (s *Subscription) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.doneCh)
	s.mu.Unlock()
	deadline := time.Now().Add(s.b.opts.CloseTimeout)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	moved := make(chan struct{})
	go func() {
		s.moves.Wait()
		close(moved)
	}()
	select {
	case <-moved:
	case <-ctx.Done():
	}
	s.mu.Lock()
	ch, dels := s.ch, s.deliveries
	s.mu.Unlock()
	if ch != nil {
		s.giveBack(ctx, ch, dels)
	} else if s.isLocked() {
		// Nothing to give back: the notes of messages this member did
		// not receive go to the next holder.
		s.giveBackToHead(ctx, nil)
	}
	s.mu.Lock()
	for d := range s.active {
		d.state = stStale
		s.forgetLocked(d)
	}
	s.ch, s.deliveries = nil, nil
	s.mu.Unlock()
	s.b.mu.Lock()
	delete(s.b.subs, s)
	s.b.mu.Unlock()
	if ch != nil {
		// What is left of the one budget: on a dead network the
		// close-ok never comes, and the channel dies with its
		// connection.
		closeChannel(ch, max(time.Until(deadline), time.Millisecond))
	}
	return nil
}

// giveBack gives every delivery of ch back to the group: those the broker
// had pushed but Receive had not returned without counting an attempt,
// and those returned and still unsettled counting one (see
// takeUnsettled). A key-ordered member gives them
// back to the head of the queue (see giveBackToHead); any other cancels
// its consumer and gives each back as a confirmed copy at the tail of the
// queue, and then acks the original. What ctx leaves no time for the
// broker gives back (counted) when the channel closes.
func (s *Subscription) giveBack(ctx context.Context, ch *amqp.Channel, dels <-chan amqp.Delivery) {
	if s.isLocked() {
		s.giveBackToHead(ctx, dels)
		return
	}
	if err := callCtx(ctx, ch, func() error { return ch.Cancel(s.tag, false) }); err != nil {
		return
	}
	var back []given
	for dels != nil {
		select {
		case d, ok := <-dels:
			if !ok {
				dels = nil
				continue
			}
			if g, ok := pushed(&d); ok {
				back = append(back, g)
			}
		case <-ctx.Done():
			return
		}
	}
	back = append(back, s.takeUnsettled()...)
	if len(back) == 0 {
		return
	}
	pubs, keys := make([]amqp.Publishing, len(back)), make([]string, len(back))
	for i, g := range back {
		pubs[i], keys[i] = g.pub, s.queue
	}
	errs, err := s.b.publishConfirmed(ctx, []string{""}, keys, pubs)
	if err != nil {
		return
	}
	for i, g := range back {
		if errs[i] == nil {
			_ = sendOn(ch, func() error { return ch.Ack(g.tag, false) })
		}
	}
}

// given is a delivery a closing subscription gives back.
type given struct {
	tag      uint64
	id       string
	count    int             // x-delivery-count
	pub      amqp.Publishing // its copy (see giveBack)
	released bool            // released by a key-ordered member (see releaseToHead)
}

// pushed is a delivery the broker pushed and Receive did not return, to
// give back; false for one that does not decode (the broker gives it
// back when the channel closes, and the next member settles it).
func pushed(d *amqp.Delivery) (given, bool) {
	dec, err := decode(d)
	if err != nil {
		return given{}, false
	}
	return given{tag: d.DeliveryTag, id: dec.msg.ID, count: dec.count, pub: encode(&dec.msg, dec.msg.Attempt-1, dec.due)}, true
}

// takeUnsettled settles, for giving back, the deliveries of the live
// channel that Receive returned and that are still unsettled or were
// released. The copy of one still unsettled counts an attempt: the bus
// settles or releases what it drains, so one left unsettled is one whose
// close ran out of time, and its handler may have run.
func (s *Subscription) takeUnsettled() []given {
	s.mu.Lock()
	defer s.mu.Unlock()
	var back []given
	for d := range s.active {
		if (d.state == stActive && !d.moving || d.state == stReleased) && d.gen == s.gen {
			released := d.state == stReleased
			d.state = stSettled
			s.forgetLocked(d)
			base := d.msg.Attempt // not released: its handler may have run, the copy counts an attempt
			if released {
				base--
			}
			back = append(back, given{tag: d.tag, id: d.msg.ID, count: d.count, pub: encode(&d.msg, base, 0), released: released})
		}
	}
	return back
}

// ceilMilli is t in Unix milliseconds, rounded up: a due time never
// comes before t.
func ceilMilli(t time.Time) int64 {
	return (t.UnixNano() + int64(time.Millisecond) - 1) / int64(time.Millisecond)
}
