package rabbitmq

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/observer"
)

// releaseNotes records, per message ID, the deliveries of the message
// that were releases rather than attempts: each value is an
// x-delivery-count that a release gave the message (its count before
// the release, plus one).
//
// A quorum queue puts a message given back with basic.nack and requeue
// (or by a channel that closed) back at the head of the queue, in the
// order it was given back, and counts the return as a delivery. A
// member of a key-ordered group (one that takes the group lock) gives
// back what it holds that way, so that it is handed out first, in
// order, to the next holder; a release note tells that holder not to
// count the return as an attempt.
type releaseNotes map[string][]int

// add records that a release gave message id the delivery count n.
func (rn releaseNotes) add(id string, n int) {
	if !slices.Contains(rn[id], n) {
		rn[id] = append(rn[id], n)
	}
}

// merge adds every note of o.
func (rn releaseNotes) merge(o releaseNotes) {
	for id, ns := range o {
		for _, n := range ns {
			rn.add(id, n)
		}
	}
}

// releasesAt is how many of the deliveries counted in a delivery count
// of n were releases of message id.
func (rn releaseNotes) releasesAt(id string, n int) int {
	r := 0
	for _, x := range rn[id] {
		if x <= n {
			r++
		}
	}
	return r
}

// encode packs the notes as (uvarint length, ID, uvarint count) triples.
func (rn releaseNotes) encode() []byte {
	var b []byte
	for id, ns := range rn {
		for _, n := range ns {
			b = binary.AppendUvarint(b, uint64(len(id)))
			b = append(b, id...)
			b = binary.AppendUvarint(b, uint64(n))
		}
	}
	return b
}

// decodeNotes reads what encode wrote into rn.
func decodeNotes(b []byte, rn releaseNotes) error {
	for len(b) > 0 {
		l, w := binary.Uvarint(b)
		if w <= 0 || uint64(len(b)-w) < l {
			return errors.New("a release note is truncated")
		}
		id := string(b[w : w+int(l)])
		b = b[w+int(l):]
		n, w := binary.Uvarint(b)
		if w <= 0 {
			return errors.New("a release note is truncated")
		}
		b = b[w:]
		rn.add(id, int(n))
	}
	return nil
}

// declareNotes declares the group's durable quorum queue of release
// notes.
func (b *Backend) declareNotes(ctx context.Context, q string) error {
	return b.declare(ctx, q, func(ch *amqp.Channel) error {
		_, err := ch.QueueDeclare(q, true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
		return err
	})
}

// writeNotes stores rn in the notes queue q as one message, confirmed.
func (b *Backend) writeNotes(ctx context.Context, q string, rn releaseNotes) error {
	if len(rn) == 0 {
		return nil
	}
	if err := b.declareNotes(ctx, q); err != nil {
		return err
	}
	errs, err := b.publishConfirmed(ctx, []string{""}, []string{q}, []amqp.Publishing{{DeliveryMode: amqp.Persistent, Body: rn.encode()}})
	if err != nil {
		return fmt.Errorf("store release notes: %w", err)
	}
	if errs[0] != nil {
		return fmt.Errorf("store release notes: %w", errs[0])
	}
	return nil
}

// takeNotes removes every message of the notes queue q and returns the
// notes they carry. A note that does not decode is dropped: the release
// it stood for counts as an attempt.
func (b *Backend) takeNotes(ctx context.Context, q string) (releaseNotes, error) {
	if err := b.declareNotes(ctx, q); err != nil {
		return nil, err
	}
	rn := releaseNotes{}
	err := b.pub.use(ctx, func(ch *amqp.Channel) error {
		for {
			d, ok, err := ch.Get(q, true)
			if err != nil || !ok {
				return err
			}
			_ = decodeNotes(d.Body, rn)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("take release notes: %w", err)
	}
	return rn, nil
}

// takeNotes reads the group's release notes once per take of the group
// lock by a holder of this backend, before the first Receive under it:
// the subscription that fetches while the lock is held here is the
// holder (a key-ordered member), and what the member before it gave back
// is handed out to it first.
func (s *Subscription) takeNotes(ctx context.Context) error {
	take, ok := s.b.lockTake(s.lockQ)
	s.mu.Lock()
	if !ok || take == s.take {
		s.mu.Unlock()
		return nil
	}
	s.mu.Unlock()
	rn, err := s.b.takeNotes(ctx, s.notesQ)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.locked, s.take = true, take
	s.notes.merge(rn)
	s.mu.Unlock()
	return nil
}

// pushQuiet is how long a closing key-ordered member waits for the
// broker to stop pushing deliveries to its consumer before it notes what
// it holds (see giveBackToHead), and pushNoteMax how long it takes
// pushed deliveries at most: the prefetch of a key-ordered member holds
// its waiting messages too, and a queue that is published to all the
// while would keep the broker pushing, and the channel open past the
// close budget, while the next holder starts.
const (
	pushQuiet   = 50 * time.Millisecond
	pushNoteMax = 10 * pushQuiet
)

// giveBackToHead gives back a key-ordered member's deliveries (dels: its
// live consumer's) to the head of the group's queue. It notes those it
// gives back without counting an attempt, confirmed: those Receive
// returned and that were released, those the broker pushed (it takes
// them until the broker has stopped pushing for pushQuiet, the prefetch
// being full or the queue empty, or for pushNoteMax, and then again
// until none came while it stored the notes), and the notes it carries
// of messages it did not receive. A delivery Receive returned that is
// neither settled nor released is not noted: its handler may have run
// (the bus's close ran out of time before its ack), so its return counts
// an attempt, as a lease that ran out does, and the next holder never
// takes it for a first attempt.
// The caller then closes the channel: a quorum queue puts the unsettled
// messages of a closed channel back at its head, in delivery order,
// where a nack after the consumer's cancel would put them at its tail.
// A delivery pushed as the channel closes, and every one when the notes
// cannot be stored, comes back all the same (order comes first) and
// counts an attempt.
func (s *Subscription) giveBackToHead(ctx context.Context, dels <-chan amqp.Delivery) {
	rn := releaseNotes{}
	s.mu.Lock()
	rn.merge(s.notes)
	s.mu.Unlock()
	for _, g := range s.takeUnsettled() {
		if g.released {
			rn.add(g.id, g.count+1)
		}
	}
	dels = s.notePushed(ctx, dels, rn)
	for range 3 {
		if err := s.b.writeNotes(ctx, s.notesQ, rn); err != nil {
			s.cfg.Observer.Observe(ctx, observer.Event{Scope: observer.ScopeShutdown, Topic: s.topic, Group: s.cfg.Group,
				Err: fmt.Errorf("rabbitmq: close %q: %w (the %d deliveries given back count an attempt)", s.queue, err, len(rn))})
			return
		}
		rn = releaseNotes{}
		for more := dels != nil; more; {
			select {
			case d, ok := <-dels:
				if !ok {
					dels, more = nil, false
				} else if g, ok := pushed(&d); ok {
					rn.add(g.id, g.count+1)
				}
			default:
				more = false
			}
		}
		if len(rn) == 0 {
			return
		}
	}
}

// notePushed notes the deliveries the broker pushed on dels (nil: none),
// as given back uncounted, until it has stopped pushing for pushQuiet (the
// prefetch is full or the queue empty), for pushNoteMax at most, or ctx
// ends. It returns dels, or
// nil once dels closed.
func (s *Subscription) notePushed(ctx context.Context, dels <-chan amqp.Delivery, rn releaseNotes) <-chan amqp.Delivery {
	if dels == nil {
		return nil
	}
	quiet := time.NewTimer(pushQuiet)
	defer quiet.Stop()
	limit := time.NewTimer(pushNoteMax)
	defer limit.Stop()
	for {
		select {
		case d, ok := <-dels:
			if !ok {
				return nil
			}
			if g, ok := pushed(&d); ok {
				rn.add(g.id, g.count+1)
			}
			quiet.Reset(pushQuiet)
		case <-quiet.C:
			return dels
		case <-limit.C:
			return dels
		case <-ctx.Done():
			return dels
		}
	}
}

// releaseToHead releases d of a key-ordered member without counting an
// attempt: it notes the release and leaves d unsettled on its channel.
// Release is how a key-ordered member gives back what it holds when it
// closes or loses the group lock, and the channel then closes (see
// giveBack and handBack): the queue puts d back at its head, before the
// later messages this member was pushed, where a nack would put it after
// them. A released delivery still on the channel when its lease ends is
// given back with a nack.
func (s *Subscription) releaseToHead(d *delivery) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d.s != s || d.state != stActive || d.gen != s.gen || d.moving {
		return fmt.Errorf("rabbitmq: release %q: %w", d.msg.ID, backend.ErrStale)
	}
	d.state = stReleased
	if s.byID[d.msg.ID] == d {
		delete(s.byID, d.msg.ID)
	}
	s.notes.add(d.msg.ID, d.count+1)
	return nil
}

// handBack gives back what the subscriptions that fetched under the take
// gen of the lock queue q hold, when the lock passed on without them
// closing (its holder did not renew it, or its connection died): it
// stores the notes of their releases and closes their channels, so that
// what they hold is back at the head of the group's queue before the
// next holder fetches.
func (b *Backend) handBack(ctx context.Context, q string, gen uint64) {
	b.mu.Lock()
	var subs []*Subscription
	for s := range b.subs {
		if s.lockQ == q {
			subs = append(subs, s)
		}
	}
	b.mu.Unlock()
	for _, s := range subs {
		s.handBack(ctx, gen)
	}
}

// handBack resets the channel of a subscription that fetched under the
// take gen of its group's lock (see resetChannel).
func (s *Subscription) handBack(ctx context.Context, gen uint64) {
	s.mu.Lock()
	take, chGen := s.take, s.gen
	s.mu.Unlock()
	if take == gen {
		s.resetChannel(ctx, chGen)
	}
}

// resetChannel closes the channel of generation gen of a key-ordered
// member, after storing the notes of its releases: the queue puts what
// the channel held unsettled back at its head, in delivery order (those
// it released uncounted, the others counted), and the next Receive opens
// a new channel. A key-ordered member does so when a lease runs out and
// when the group lock passes on without it closing, where a nack would
// put the message after the later ones the broker has pushed it.
func (s *Subscription) resetChannel(ctx context.Context, gen uint64) {
	s.mu.Lock()
	ch := s.ch
	if ch == nil || s.gen != gen {
		s.mu.Unlock()
		return
	}
	dels := s.deliveries
	if s.receiving {
		dels = nil // a Receive reads them: those it does not return count an attempt
	}
	s.ch, s.deliveries = nil, nil
	rn := releaseNotes{}
	rn.merge(s.notes)
	for d := range s.active {
		if d.gen == gen {
			if d.state == stReleased {
				rn.add(d.msg.ID, d.count+1)
			}
			d.state = stStale
			s.forgetLocked(d)
		}
	}
	s.mu.Unlock()
	s.notePushed(ctx, dels, rn)
	if err := s.b.writeNotes(ctx, s.notesQ, rn); err != nil {
		s.cfg.Observer.Observe(ctx, observer.Event{Scope: observer.ScopeLease, Topic: s.topic, Group: s.cfg.Group,
			Err: fmt.Errorf("rabbitmq: give back what %q holds: %w (its releases count an attempt)", s.queue, err)})
	}
	closeChannel(ch, s.b.opts.CloseTimeout)
}
