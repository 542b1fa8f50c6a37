package bus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/peek"
	"github.com/eventbus-go/bus/observer"
)

// This file holds the key failure policy of key-ordered subscriptions
// (WithKeyFailure). With KeyHold, a key whose head was dead-lettered is
// held: its later messages are parked on the dead-letter topic (code
// held) instead of reaching the handler, until the head comes back
// (ReplayDeadLetters) or the key is released (ReleaseKey). The hold is
// stored at the broker, in the dead-letter topic itself: the head's copy
// carries headerHolds, each parked copy headerHeldBy. The member that
// holds the group lock learns the held keys from there when it takes
// the lock, so a hold survives a restart and a member change; replays
// and releases travel through the topic, in the key's order, so the
// member learns of them in that order too.

// KeyFailure is what a key-ordered subscription does with a key whose
// head was dead-lettered (WithKeyFailure).
type KeyFailure string

const (
	// KeySkip moves on: the key's next message is handled after its
	// head was dead-lettered. The default.
	KeySkip KeyFailure = "skip"
	// KeyHold holds the key: its later messages are parked on the
	// dead-letter topic with code held, in order, until the head is
	// replayed (ReplayDeadLetters, which replays them after it) or the
	// key is released (ReleaseKey).
	KeyHold KeyFailure = "hold"
)

// Headers of the key hold. The dead-letter ones (bus-dlq-*) are removed
// when a dead letter is read or replayed; the others travel with a
// replayed message.
const (
	// headerHolds marks the dead-letter copy of a head that holds its key.
	headerHolds = "bus-dlq-holds"
	// headerHeldBy is, on a parked copy, the ID of the head it waits
	// behind.
	headerHeldBy = "bus-dlq-held-by"
	// headerReplayGroup is, on a message replayed from a hold, the group
	// it is replayed for: the members of other groups acknowledge it
	// without handling it (they handled it the first time).
	headerReplayGroup = "bus-replay-group"
	// headerRelease is, on the head of a held key republished by
	// ReleaseKey, the release of its key: the subscription lifts the
	// hold and acknowledges it unhandled.
	headerRelease = "bus-hold-release"
	// headerHoldUntil is, on a replayed head, the ID of the last message
	// parked behind it, replayed after it: the hold ends when it is
	// back.
	headerHoldUntil = "bus-hold-until"
)

// WithKeyFailure sets what a key-ordered subscription (WithKeyOrdering)
// does once a key's head is dead-lettered (max deliveries reached,
// Reject, undecodable, expired, ...): KeySkip (the default) handles the
// key's next message; KeyHold holds the key, so that no later message of
// it is handled until an operator acts: each is parked on the
// dead-letter topic with code held (DeadLetter.HeldBy names the head),
// in order. Replaying the head (ReplayDeadLetters) replays its parked
// messages right after it, and the group handles them in their original
// order, after the head; ReleaseKey gives the head up (it stays a dead
// letter, code released) and replays the parked messages. HeldKeys lists
// the held keys.
//
// The hold is stored at the broker, in the dead-letter topic: a member
// that takes the group over, after a restart or a crash, learns the held
// keys from there before it fetches. KeyHold needs WithKeyOrdering, a
// dead-letter topic, an ack mode that redelivers (not AckOnReceive), an
// unpartitioned topic, and a backend with a group lock and inspection
// (mem, Redis, NATS JetStream, PostgreSQL); Subscribe refuses
// it otherwise, before any I/O. See docs/ordering.md.
func WithKeyFailure(f KeyFailure) SubscribeOption {
	return subOptionFunc(func(s *subscribeOptions) error {
		switch f {
		case KeySkip, "":
			s.keyHold = false
		case KeyHold:
			s.keyHold = true
		default:
			return fmt.Errorf("%w: key failure %q (want %q or %q)", ErrInvalidOption, string(f), KeySkip, KeyHold)
		}
		return nil
	})
}

// keyHoldErrors are the reasons o cannot hold failed keys on a backend
// of caps (be), before any I/O.
func (o *subscribeOptions) keyHoldErrors(be backend.Backend, caps backend.Capabilities) []error {
	if !o.keyHold {
		return nil
	}
	var errs []error
	if !o.keyOrdering {
		errs = append(errs, fmt.Errorf("%w: WithKeyFailure(KeyHold) holds a key behind its head; it needs WithKeyOrdering", ErrInvalidOption))
	}
	if o.deadLetter == "" {
		errs = append(errs, fmt.Errorf("%w: WithKeyFailure(KeyHold) parks a held key's messages on the dead-letter topic; give WithDeadLetter a topic", ErrInvalidOption))
	}
	if o.ackMode == AckOnReceive {
		errs = append(errs, fmt.Errorf("%w: WithKeyFailure(KeyHold) parks messages before they are acked, and AckOnReceive acks on receipt; use AckOnSuccess or AckManual", ErrInvalidOption))
	}
	if o.broadcast {
		errs = append(errs, fmt.Errorf("%w: WithKeyFailure(KeyHold) keeps its holds with the group, and a broadcast subscription's group ends with it; drop one of them", ErrInvalidOption))
	}
	if o.batching {
		errs = append(errs, fmt.Errorf("%w: WithKeyFailure(KeyHold) works with Subscribe's single deliveries, not SubscribeBatch", ErrInvalidOption))
	}
	_, locker := be.(backend.GroupLocker)
	_, inspects := be.(backend.Inspector)
	if !locker || !inspects || !caps.Redelivery || caps.KeyOwnership {
		errs = append(errs, fmt.Errorf("%w: WithKeyFailure(KeyHold) needs a group lock (one member consumes at a time) and inspection (the holds are read back from the dead-letter topic); %s has not both", ErrUnsupported, caps.Name))
	}
	return errs
}

// keyHolds are the held keys of a subscription.
type keyHolds struct {
	mu    sync.Mutex
	heads map[string]keyHold
	// unseen are the holds this subscription set that no read of the
	// dead-letter topic has shown yet: a read may miss a head stored a
	// moment before (a replicated store answering from a replica behind
	// its leader), and replace keeps them until one shows them or they
	// are lifted.
	unseen map[string]keyHold
}

// keyHold is one held key: the ID of its dead-lettered head and, once
// the head came back replayed, the last message parked behind it, which
// ends the hold when it comes back too (see holdStep).
type keyHold struct {
	head  string
	until string // "": the head has not come back
	// back are the earlier untils of the hold, which came back: a
	// replay stores a message again before it removes its copy from
	// the dead-letter topic, so their copies may still be there, no
	// longer parked.
	back []string
}

func (h *keyHolds) get(key string) (keyHold, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	k, ok := h.heads[key]
	return k, ok
}

// set holds key behind the head id.
func (h *keyHolds) set(key, id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.heads[key] = keyHold{head: id}
	if h.unseen == nil {
		h.unseen = map[string]keyHold{}
	}
	h.unseen[key] = keyHold{head: id}
}

// drain marks the hold of key behind head as ending when until comes
// back; back are the untils of the hold that came back before.
func (h *keyHolds) drain(key, head, until string, back []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if k, ok := h.heads[key]; ok && k.head == head {
		h.heads[key] = keyHold{head: head, until: until, back: back}
	}
}

// lift ends the hold of key when its head is id.
func (h *keyHolds) lift(key, id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.heads[key].head == id {
		delete(h.heads, key)
	}
	if h.unseen[key].head == id {
		delete(h.unseen, key)
	}
}

// replace sets the holds to heads, read from the dead-letter topic, and
// the holds this subscription set that the read did not show yet.
func (h *keyHolds) replace(heads map[string]keyHold) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for key, k := range h.unseen {
		if heads[key].head == k.head {
			delete(h.unseen, key)
		} else if _, ok := heads[key]; !ok {
			heads[key] = k
		}
	}
	h.heads = heads
}

// heldReason is the reason a delivery is parked: the key's head.
type heldReason struct{ head string }

func (r *heldReason) Error() string {
	return fmt.Sprintf("held: its key waits behind %q, dead-lettered before it (KeyHold)", r.head)
}

// errReleased is the reason the head of a released key stays a dead
// letter.
var errReleased = errors.New("released: its key was released without it (ReleaseKey)")

// replayedElsewhere reports whether d is a message replayed from a hold
// for another group, or the release of a key and this subscription holds
// none: it acknowledges it without handling it.
func (s *consumer) replayedElsewhere(d *record) bool {
	g, ok := d.pub.Headers[headerReplayGroup]
	if !ok {
		return false
	}
	if g != s.cfg.Group {
		return true
	}
	_, release := d.pub.Headers[headerRelease]
	return release && s.holds == nil
}

// holdStep applies the key's hold to d before its handler runs, and
// reports whether d is settled here: parked behind its key's head, or
// the release of its key, acknowledged unhandled.
//
// A replayed head goes on to the handler (a head that fails again holds
// its key again), and a release is acknowledged; either starts the end
// of the hold (startDrain): the key stays held for anything but the
// replays for this group until the last message parked behind the head
// (headerHoldUntil) is back, so that a message published meanwhile, which
// may come between the head and its parked messages, is parked behind
// them and replayed after them (endDrain), instead of running before
// them.
func (s *consumer) holdStep(d *record) bool {
	key := d.pub.Key
	h, held := s.holds.get(key)
	if _, ok := d.pub.Headers[headerRelease]; ok {
		if held && h.until == "" && d.pub.ID == h.head {
			s.startDrain(key, h.head, d)
		}
		if d.claim() {
			s.settleErr(d, observer.ScopeAck, d.doAck())
		}
		return true
	}
	if !held {
		return false
	}
	_, replayed := d.pub.Headers[HeaderReplayed]
	switch {
	case replayed && h.until == "" && d.pub.ID == h.head:
		s.startDrain(key, h.head, d)
		return false
	case replayed && h.until != "" && d.pub.Headers[headerReplayGroup] == s.cfg.Group:
		if d.pub.ID == h.until {
			s.endDrain(key, h)
		}
		return false
	}
	if d.pub.ID == h.head && !replayed {
		// The head again (its dead letter, which holds the key, was
		// written but its ack did not arrive): it is settled already.
		if d.claim() {
			s.settleErr(d, observer.ScopeAck, d.doAck())
		}
		return true
	}
	if d.claim() {
		s.deadLetter(d, withCode(CodeHeld, &heldReason{head: h.head}))
	}
	return true
}

// startDrain starts the end of key's hold behind head, which d (the
// replayed head, or the release) names: it ends once the last message
// parked behind the head when it was replayed is back, at once when
// there was none.
func (s *consumer) startDrain(key, head string, d *record) {
	until := d.pub.Headers[headerHoldUntil]
	if until == "" {
		s.endDrain(key, keyHold{head: head, until: head})
		return
	}
	s.holds.drain(key, head, until, nil)
}

// endDrain is called when the message h.until ends the hold of key
// comes back: what is still parked behind h.head then (parked after the
// replay read the parked messages, or while the hold ended) is replayed
// after it, in order, and the hold ends when the last of those is back;
// with nothing parked, the hold ends now. The copies of h.until and of
// the untils before it are not parked any more, even while they are
// still on the dead-letter topic (the replay that brought them back
// removes them after it stored them again): they are not replayed twice. A failure is reported and ends
// the hold: what is left parked stays on the dead-letter topic, where
// HeldKeys lists it and ReleaseKey replays it.
func (s *consumer) endDrain(key string, h keyHold) {
	ctx, cancel := s.settleCtx()
	defer cancel()
	in := s.bus.be.(backend.Inspector)
	dlq := s.cfg.DeadLetter
	head := &DeadLetter{Message: Message{ID: h.head, Key: key}, Topic: s.cfg.Topic, Group: s.cfg.Group}
	back := append(slices.Clip(h.back), h.until)
	parked, copies, err := s.bus.parkedBehind(ctx, in, dlq, head, back...)
	for i := 0; err == nil && i < len(parked); i++ {
		err = s.bus.replay(ctx, in, dlq, &parked[i], copies[i])
	}
	if err != nil || len(parked) == 0 {
		s.holds.lift(key, h.head)
		if err != nil {
			s.observe(observer.Event{Scope: observer.ScopeDeadLetter, Topic: s.cfg.Topic, Group: s.cfg.Group,
				Err: fmt.Errorf("bus: end the hold of a key behind %q: %w (what is left parked stays on %q: ReleaseKey replays it)", h.head, err, dlq)})
		}
		return
	}
	s.holds.drain(key, h.head, parked[len(parked)-1].ID, back)
}

// markHold sets the hold headers of cp, the dead-letter copy of d made
// for reason, and reports whether d holds its key once stored.
func (s *consumer) markHold(d *record, cp *backend.Message, code backend.DeadLetterCode, reason error) bool {
	if s.holds == nil || d.pub.Key == "" {
		return false
	}
	if code == CodeHeld {
		var r *heldReason
		if errors.As(reason, &r) {
			cp.Headers[headerHeldBy] = r.head
		}
		return false
	}
	cp.Headers[headerHolds] = "true"
	return true
}

// loadHolds reads the subscription's held keys from its dead-letter
// topic: the last head stored for each key by this topic and group.
func (s *consumer) loadHolds(ctx context.Context) error {
	in := s.bus.be.(backend.Inspector)
	heads := map[string]keyHold{}
	err := peek.All(ctx, in, s.cfg.DeadLetter, peekPage, func(m *backend.Message) bool {
		if m.Key != "" && m.Headers[headerHolds] != "" &&
			m.Headers[backend.HeaderDeadLetterTopic] == s.cfg.Topic && m.Headers[backend.HeaderDeadLetterGroup] == s.cfg.Group {
			heads[m.Key] = keyHold{head: m.ID}
		}
		return true
	})
	if err != nil && !errors.Is(err, backend.ErrNotFound) {
		return fmt.Errorf("bus: read the held keys of group %q from %q: %w", s.cfg.Group, s.cfg.DeadLetter, err)
	}
	s.holds.replace(heads)
	return nil
}

// holdsTimeout bounds one read of the held keys.
const holdsTimeout = 30 * time.Second

// learnHolds reads the held keys before the subscription fetches, and
// reports whether it could; a failure is reported, and the caller asks
// again before it fetches anything.
func (s *consumer) learnHolds() bool {
	ctx, cancel := context.WithTimeout(s.fetchCtx, holdsTimeout)
	defer cancel()
	if err := s.loadHolds(ctx); err != nil {
		s.observe(observer.Event{Scope: observer.ScopeLease, Topic: s.cfg.Topic, Group: s.cfg.Group,
			Err: fmt.Errorf("%w (asking again before fetching)", err)})
		return false
	}
	return true
}

// holdsReady reports whether the member that holds the lock knows the
// held keys, so that it may fetch: without holds, at once; else once a
// read of the dead-letter topic made since it took the lock succeeded.
// It starts that read, in the background (the lock goes on being
// renewed meanwhile), when none is under way.
func (o *groupLock) holdsReady() bool {
	if o.s.holds == nil {
		return true
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	switch o.holdsState {
	case holdsLoaded:
		return true
	case holdsLoading:
		return false
	}
	o.holdsState = holdsLoading
	gen := o.holdsGen
	o.loaders.Add(1)
	go func() {
		defer o.loaders.Done()
		ok := o.s.learnHolds()
		o.mu.Lock()
		defer o.mu.Unlock()
		if o.holdsGen != gen {
			return // the lock was lost meanwhile: read again at the next take
		}
		o.holdsState = holdsUnknown
		if ok {
			o.holdsState = holdsLoaded
		}
	}()
	return false
}

// forgetHolds makes the next take of the lock read the held keys again.
func (o *groupLock) forgetHolds() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.holdsGen++
	o.holdsState = holdsUnknown
}

// States of the held keys a member that holds the lock knows.
const (
	holdsUnknown = iota
	holdsLoading
	holdsLoaded
)
