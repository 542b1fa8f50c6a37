package bus

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/peek"
)

// This file holds the portable operations on a backend's state: listing
// topics and groups, and listing, replaying and purging dead letters. They
// need a backend that implements backend.Inspector; without one they
// return an error wrapping ErrUnsupported.

// DeadLetter is one message on a dead-letter topic and why it is there.
type DeadLetter struct {
	// Message is the original message: its ID, key, payload and user
	// headers (the bus-dlq-* headers are removed).
	Message
	// Reason is the human-readable reason; Code the machine-readable one
	// (CodeMaxDeliveries, CodeRejected, ...; empty for dead letters
	// written before codes existed). A code stored in an earlier spelling
	// ("max-deliveries", "lease-lost", "permanent") reads as today's.
	Reason string
	Code   DeadLetterCode
	// Topic and Group are where the message was consumed when it was
	// dead-lettered, and Attempt the attempt that gave up.
	Topic   string
	Group   string
	Attempt int
	// Time is when it was dead-lettered (zero if not recorded).
	Time time.Time
	// Holds reports whether it holds its key: a subscription with
	// WithKeyFailure(KeyHold) dead-lettered it, and parks the key's
	// later messages behind it. HeldBy is, on a parked message (code
	// held), the ID of the head it waits behind.
	Holds  bool
	HeldBy string
}

// DeadLetters lists up to limit dead letters of the topic dlq, oldest
// first (limit <= 0 means all); messages of dlq without the dead-letter
// headers are skipped. Listing consumes nothing.
func (b *Bus) DeadLetters(ctx context.Context, dlq string, limit int) ([]DeadLetter, error) {
	if err := backend.ValidateTopic(dlq); err != nil {
		return nil, fmt.Errorf("bus: dead letters: %w", err)
	}
	in, err := b.inspector("dead letters")
	if err != nil {
		return nil, err
	}
	var out []DeadLetter
	err = peek.All(ctx, in, dlq, peekPage, func(m *backend.Message) bool {
		if backend.IsDeadLetter(m) {
			out = append(out, decodeDeadLetter(m))
		}
		return limit <= 0 || len(out) < limit
	})
	if err != nil {
		return nil, fmt.Errorf("bus: dead letters of %q: %w", dlq, err)
	}
	return out, nil
}

// ReplayDeadLetters publishes dead letters of dlq back to the topic each
// came from and then removes them from dlq. ids selects them by message ID;
// no ids means all. The original ID, key, payload and user headers are
// kept, the bus-dlq-* headers removed, and the replayed message starts
// again at attempt 1. A message leaves dlq only after it is stored on its
// topic, so a crash in between may duplicate it but never loses it. It
// returns how many were replayed. IDs that name no dead letter of dlq are
// an error wrapping ErrNotFound, after the others were replayed.
//
// The head of a held key (DeadLetter.Holds, WithKeyFailure(KeyHold)) is
// replayed with the messages parked behind it, right after it, in their
// order, whether ids names them or not; the group that held the key
// handles them after the head, and the other groups of the topic, which
// handled them when they were published, acknowledge them unhandled.
func (b *Bus) ReplayDeadLetters(ctx context.Context, dlq string, ids ...string) (int, error) {
	if err := backend.ValidateTopic(dlq); err != nil {
		return 0, fmt.Errorf("bus: replay dead letters: %w", err)
	}
	in, err := b.inspector("replay dead letters")
	if err != nil {
		return 0, err
	}
	picked, missing, err := pickDeadLetters(ctx, in, dlq, ids)
	if err != nil {
		return 0, fmt.Errorf("bus: replay dead letters of %q: %w", dlq, err)
	}
	replayed := 0
	done := map[string]bool{} // heads replayed with their parked messages
	for _, m := range picked {
		dl := decodeDeadLetter(m)
		switch {
		case dl.Holds:
			n, err := b.replayHold(ctx, in, dlq, &dl, m)
			replayed += n
			if err != nil {
				return replayed, err
			}
			done[dl.ID] = true
		case dl.HeldBy != "" && done[dl.HeldBy]:
			// Replayed after its head.
		default:
			if err := b.replay(ctx, in, dlq, &dl, m); err != nil {
				return replayed, err
			}
			replayed++
		}
	}
	return replayed, notFound("replay dead letters of", dlq, missing)
}

// replay publishes one dead letter to its original topic, then removes its
// copy stored from dlq.
func (b *Bus) replay(ctx context.Context, in backend.Inspector, dlq string, dl *DeadLetter, stored *backend.Message) error {
	if dl.Topic == "" {
		return fmt.Errorf("bus: replay dead letter %q of %q: %w: it names no original topic", dl.ID, dlq, ErrInvalidMessage)
	}
	m := dl.Message
	m.Headers = maps.Clone(m.Headers)
	at := time.Now()
	m.Headers[backend.HeaderReplayed] = strconv.FormatInt(at.UnixNano(), 10)
	if dl.Holds || dl.HeldBy != "" {
		m.Headers[headerReplayGroup] = dl.Group
	}
	if err := b.publishReplay(ctx, dl.Topic, &m); err != nil {
		return fmt.Errorf("bus: replay dead letter %q of %q to %q: %w", dl.ID, dlq, dl.Topic, err)
	}
	if err := deleteStored(ctx, in, dlq, stored); err != nil {
		return fmt.Errorf("bus: replay dead letter %q: stored on %q, but not removed from %q: %w", dl.ID, dl.Topic, dlq, err)
	}
	b.emitReplayed(dlq, dl, at)
	return nil
}

// deleteStored removes the copy stored from dlq: only that copy where the
// backend is a CopyDeleter, so that a dead letter the replayed message
// left meanwhile stays; every message of dlq with its ID otherwise.
func deleteStored(ctx context.Context, in backend.Inspector, dlq string, stored *backend.Message) error {
	if cd, ok := in.(backend.CopyDeleter); ok {
		_, err := cd.DeleteCopies(ctx, dlq, []*backend.Message{stored})
		return err
	}
	_, err := in.Delete(ctx, dlq, []string{stored.ID})
	return err
}

// PurgeDeadLetters removes dead letters from dlq: those whose message IDs
// are listed, or all of them when ids is empty. Messages of dlq without
// the dead-letter headers are never removed. It returns how many it
// removed. IDs that name no dead letter of dlq are an error wrapping
// ErrNotFound, after the others were removed.
func (b *Bus) PurgeDeadLetters(ctx context.Context, dlq string, ids ...string) (int, error) {
	if err := backend.ValidateTopic(dlq); err != nil {
		return 0, fmt.Errorf("bus: purge dead letters: %w", err)
	}
	in, err := b.inspector("purge dead letters")
	if err != nil {
		return 0, err
	}
	picked, missing, err := pickDeadLetters(ctx, in, dlq, ids)
	if err != nil {
		return 0, fmt.Errorf("bus: purge dead letters of %q: %w", dlq, err)
	}
	n := 0
	if len(picked) > 0 {
		found := make([]string, len(picked))
		for i, m := range picked {
			found[i] = m.ID
		}
		if n, err = in.Delete(ctx, dlq, found); err != nil {
			return n, fmt.Errorf("bus: purge dead letters of %q: %w", dlq, err)
		}
	}
	return n, notFound("purge dead letters of", dlq, missing)
}

// pickDeadLetters reads the dead letters of dlq that ids name (all of them
// when ids is empty), and the ids that name none.
func pickDeadLetters(ctx context.Context, in backend.Inspector, dlq string, ids []string) (picked []*backend.Message, missing []string, err error) {
	want := idSet(ids)
	seen := map[string]bool{}
	err = peek.All(ctx, in, dlq, peekPage, func(m *backend.Message) bool {
		if backend.IsDeadLetter(m) && (want == nil || want[m.ID]) && !seen[m.ID] {
			seen[m.ID] = true
			picked = append(picked, m)
		}
		return true
	})
	for _, id := range ids {
		if !seen[id] {
			missing = append(missing, id)
			seen[id] = true
		}
	}
	return picked, missing, err
}

// notFound is the error for ids that named no dead letter of dlq, or nil.
func notFound(op, dlq string, ids []string) error {
	switch {
	case len(ids) == 0:
		return nil
	case len(ids) > 5:
		return fmt.Errorf("bus: %s %q: %w: %s and %d more", op, dlq, backend.ErrNotFound, strings.Join(ids[:5], ", "), len(ids)-5)
	}
	return fmt.Errorf("bus: %s %q: %w: %s", op, dlq, backend.ErrNotFound, strings.Join(ids, ", "))
}

// publishReplay publishes one replayed message: it is validated like any
// other, with HeaderReplayed as the one reserved header allowed.
func (b *Bus) publishReplay(ctx context.Context, topic string, m *Message) error {
	v := *m
	v.Headers = maps.Clone(m.Headers)
	delete(v.Headers, backend.HeaderReplayed)
	delete(v.Headers, headerReplayGroup)
	delete(v.Headers, headerRelease)
	delete(v.Headers, headerHoldUntil)
	if err := validateMessage(&v, b.opts.maxPayload, b.opts.payloadLimit); err != nil {
		return err
	}
	return b.be.Publish(ctx, topic, []*backend.Message{{
		ID: m.ID, Key: m.Key, Headers: m.Headers, Payload: m.Payload, PublishedAt: time.Now(),
	}})
}

func idSet(ids []string) map[string]bool {
	if len(ids) == 0 {
		return nil
	}
	set := make(map[string]bool, len(ids))
	for _, id := range ids {
		set[id] = true
	}
	return set
}

// decodeDeadLetter splits a dead-letter copy into the original message and
// the dead-letter headers.
func decodeDeadLetter(m *backend.Message) DeadLetter {
	h := make(map[string]string, len(m.Headers))
	for k, v := range m.Headers {
		if !strings.HasPrefix(strings.ToLower(k), "bus-dlq-") && k != headerRelease && k != headerReplayGroup && k != headerHoldUntil {
			h[k] = v
		}
	}
	dl := DeadLetter{
		Message: Message{ID: m.ID, Key: m.Key, Headers: h, Payload: m.Payload},
		Reason:  m.Headers[backend.HeaderDeadLetterReason],
		Code:    backend.ParseDeadLetterCode(m.Headers[backend.HeaderDeadLetterCode]),
		Topic:   m.Headers[backend.HeaderDeadLetterTopic],
		Group:   m.Headers[backend.HeaderDeadLetterGroup],
	}
	dl.Attempt, _ = strconv.Atoi(m.Headers[backend.HeaderDeadLetterAttempt])
	dl.Holds = m.Headers[headerHolds] != ""
	dl.HeldBy = m.Headers[headerHeldBy]
	if t, err := time.Parse(time.RFC3339Nano, m.Headers[backend.HeaderDeadLetterTime]); err == nil {
		dl.Time = t
	} else {
		dl.Time = m.PublishedAt
	}
	return dl
}

// replayHold replays the head of a held key and then the messages parked
// behind it, in their order, and returns how many it replayed. The head
// names the last of them (headerHoldUntil): the subscription keeps the
// key held for anything else until that one is back, and then replays
// itself what was parked behind the head meanwhile (see
// consumer.endDrain).
func (b *Bus) replayHold(ctx context.Context, in backend.Inspector, dlq string, head *DeadLetter, stored *backend.Message) (int, error) {
	parked, copies, err := b.parkedBehind(ctx, in, dlq, head)
	if err != nil {
		return 0, err
	}
	if len(parked) > 0 {
		head.Headers = maps.Clone(head.Headers)
		head.Headers[headerHoldUntil] = parked[len(parked)-1].ID
	}
	if err := b.replay(ctx, in, dlq, head, stored); err != nil {
		return 0, err
	}
	for i := range parked {
		if err := b.replay(ctx, in, dlq, &parked[i], copies[i]); err != nil {
			return 1 + i, err
		}
	}
	return 1 + len(parked), nil
}

// parkedBehind reads the messages of dlq parked behind head, in their
// order, but those whose IDs are in but, and the copies they were read
// from.
func (b *Bus) parkedBehind(ctx context.Context, in backend.Inspector, dlq string, head *DeadLetter, but ...string) (parked []DeadLetter, copies []*backend.Message, err error) {
	type read struct {
		dl   DeadLetter
		copy *backend.Message
	}
	var found []read
	err = peek.All(ctx, in, dlq, peekPage, func(m *backend.Message) bool {
		if m.Key == head.Key && m.Headers[headerHeldBy] == head.ID && !slices.Contains(but, m.ID) &&
			m.Headers[backend.HeaderDeadLetterTopic] == head.Topic && m.Headers[backend.HeaderDeadLetterGroup] == head.Group {
			found = append(found, read{decodeDeadLetter(m), m})
		}
		return true
	})
	if err != nil {
		return nil, nil, fmt.Errorf("bus: read the messages parked behind %q on %q: %w", head.ID, dlq, err)
	}
	// In the order they were parked, which is the key's order: a
	// backend's log may hold stores that overlapped in another order.
	slices.SortStableFunc(found, func(a, b read) int { return a.dl.Time.Compare(b.dl.Time) })
	for _, r := range found {
		parked = append(parked, r.dl)
		copies = append(copies, r.copy)
	}
	return parked, copies, nil
}

// releaseHold sends the head of a held key through its topic as the
// key's release, and then stores it on dlq again with code released (not
// holding its key any more), and replays the messages parked behind it;
// it returns how many of those it replayed. The subscription that holds
// the key acknowledges the release unhandled and ends the hold as after
// a replayed head (see replayHold).
func (b *Bus) releaseHold(ctx context.Context, in backend.Inspector, dlq string, head *DeadLetter, raw *backend.Message) (int, error) {
	parked, copies, err := b.parkedBehind(ctx, in, dlq, head)
	if err != nil {
		return 0, err
	}
	rel := *head
	rel.Headers = maps.Clone(head.Headers)
	rel.Headers[headerRelease] = "true"
	if len(parked) > 0 {
		rel.Headers[headerHoldUntil] = parked[len(parked)-1].ID
	}
	if err := b.replay(ctx, in, dlq, &rel, raw); err != nil {
		return 0, err
	}
	cp := *raw
	cp.Headers = maps.Clone(raw.Headers)
	delete(cp.Headers, headerHolds)
	cp.Headers[backend.HeaderDeadLetterCode] = string(CodeReleased)
	cp.Headers[backend.HeaderDeadLetterReason] = errReleased.Error()
	// A copy of its own for the backends that deduplicate by ID.
	cp.Headers[backend.HeaderReplayed] = strconv.FormatInt(time.Now().UnixNano(), 10)
	cp.PublishedAt = time.Now()
	if err := b.be.Publish(ctx, dlq, []*backend.Message{&cp}); err != nil {
		return 0, fmt.Errorf("bus: release key %q: its head %q is released, but not stored again on %q: %w", head.Key, head.ID, dlq, err)
	}
	for i := range parked {
		if err := b.replay(ctx, in, dlq, &parked[i], copies[i]); err != nil {
			return i, err
		}
	}
	return len(parked), nil
}

// HeldKey is a key that a subscription with WithKeyFailure(KeyHold)
// holds, as its dead-letter topic shows it (HeldKeys).
type HeldKey struct {
	// Topic and Group are the subscription's; Key the held key.
	Topic, Group, Key string
	// Head is the ID of the dead-lettered message that holds the key;
	// empty when only parked messages are left (its head was purged, or
	// a replay or the member ending the hold stopped half-way): a member
	// that takes the group over does not hold the key, and ReleaseKey
	// replays them.
	Head string
	// Parked counts the messages parked behind the head, each once
	// (a message parked again after a redelivery is one message).
	Parked int
	// Since is when the head was dead-lettered.
	Since time.Time
}

// HeldKeys lists the held keys of the subscriptions whose dead-letter
// topic is dlq (WithKeyFailure(KeyHold)), ordered by topic, group and
// the time each was held. Listing consumes nothing.
func (b *Bus) HeldKeys(ctx context.Context, dlq string) ([]HeldKey, error) {
	if err := backend.ValidateTopic(dlq); err != nil {
		return nil, fmt.Errorf("bus: held keys: %w", err)
	}
	in, err := b.inspector("held keys")
	if err != nil {
		return nil, err
	}
	type ref struct{ topic, group, key string }
	var order []ref
	held := map[ref]*HeldKey{}
	heads := map[ref]string{}
	parked := map[ref]map[string]int{} // head ID -> parked count
	seen := map[ref]map[string]bool{}  // parked message IDs: a message parked twice counts once
	err = peek.All(ctx, in, dlq, peekPage, func(m *backend.Message) bool {
		if !backend.IsDeadLetter(m) || m.Key == "" || m.Headers[headerHolds] == "" && m.Headers[headerHeldBy] == "" {
			return true
		}
		dl := decodeDeadLetter(m)
		r := ref{dl.Topic, dl.Group, dl.Key}
		h := held[r]
		if h == nil {
			h = &HeldKey{Topic: dl.Topic, Group: dl.Group, Key: dl.Key}
			held[r] = h
			order = append(order, r)
			parked[r] = map[string]int{}
			seen[r] = map[string]bool{}
		}
		if dl.Holds {
			heads[r] = dl.ID
			h.Since = dl.Time
		} else if !seen[r][dl.ID] {
			seen[r][dl.ID] = true
			parked[r][dl.HeldBy]++
		}
		return true
	})
	if err != nil && !errors.Is(err, backend.ErrNotFound) {
		return nil, fmt.Errorf("bus: held keys of %q: %w", dlq, err)
	}
	out := make([]HeldKey, 0, len(order))
	for _, r := range order {
		h := held[r]
		h.Head = heads[r]
		if h.Head != "" {
			h.Parked = parked[r][h.Head]
		} else {
			for _, c := range parked[r] {
				h.Parked += c
			}
		}
		out = append(out, *h)
	}
	slices.SortStableFunc(out, func(a, b HeldKey) int {
		return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Group, b.Group), a.Since.Compare(b.Since))
	})
	return out, nil
}

// ReleaseKey releases a key that the group holds on topic
// (WithKeyFailure(KeyHold)), whose dead letters are on dlq: the head
// stays given up, and the messages parked behind it are handled, in their
// order. The head goes through topic as the key's release, which the
// group's subscription takes in the key's order and acknowledges
// unhandled, lifting the hold; it stays on dlq with code released (it
// no longer holds its key; a crash in the middle of ReleaseKey may lose
// that copy); then the parked messages are replayed after it, as
// ReplayDeadLetters replays them. It returns how many parked messages it
// replayed. A key with no head and no parked message on dlq is an error
// wrapping ErrNotFound; one with only parked messages left (a replay
// that stopped half-way) has them replayed.
func (b *Bus) ReleaseKey(ctx context.Context, dlq, topic, group, key string) (int, error) {
	for _, t := range []string{dlq, topic} {
		if err := backend.ValidateTopic(t); err != nil {
			return 0, fmt.Errorf("bus: release key: %w", err)
		}
	}
	if group == "" || key == "" {
		return 0, fmt.Errorf("bus: release key: %w: the group and the key must not be empty", ErrInvalidOption)
	}
	in, err := b.inspector("release key")
	if err != nil {
		return 0, err
	}
	var head *DeadLetter
	var raw *backend.Message
	parked := 0
	err = peek.All(ctx, in, dlq, peekPage, func(m *backend.Message) bool {
		if m.Key != key || m.Headers[backend.HeaderDeadLetterTopic] != topic || m.Headers[backend.HeaderDeadLetterGroup] != group {
			return true
		}
		switch {
		case m.Headers[headerHolds] != "":
			dl := decodeDeadLetter(m)
			head, raw = &dl, m
		case m.Headers[headerHeldBy] != "":
			parked++
		}
		return true
	})
	if err != nil {
		return 0, fmt.Errorf("bus: release key %q of group %q on %q: %w", key, group, topic, err)
	}
	switch {
	case head != nil:
		return b.releaseHold(ctx, in, dlq, head, raw)
	case parked > 0:
		return b.replayOrphans(ctx, in, dlq, topic, group, key)
	}
	return 0, fmt.Errorf("bus: release key %q of group %q on %q: %w: no held key on %q", key, group, topic, backend.ErrNotFound, dlq)
}

// replayOrphans replays the parked messages of key whose head is not on
// dlq any more, in their order, after a release of the key, addressed as
// from the head the first of them names (a subscription that still holds
// the key behind that head lifts the hold as for ReleaseKey's).
func (b *Bus) replayOrphans(ctx context.Context, in backend.Inspector, dlq, topic, group, key string) (int, error) {
	var msgs []DeadLetter
	var copies []*backend.Message
	err := peek.All(ctx, in, dlq, peekPage, func(m *backend.Message) bool {
		if m.Key == key && m.Headers[headerHeldBy] != "" &&
			m.Headers[backend.HeaderDeadLetterTopic] == topic && m.Headers[backend.HeaderDeadLetterGroup] == group {
			msgs = append(msgs, decodeDeadLetter(m))
			copies = append(copies, m)
		}
		return true
	})
	if err != nil {
		return 0, fmt.Errorf("bus: release key %q of group %q on %q: %w", key, group, topic, err)
	}
	release := &Message{ID: msgs[0].HeldBy, Key: key, Headers: map[string]string{
		headerRelease:          "true",
		headerReplayGroup:      group,
		headerHoldUntil:        msgs[len(msgs)-1].ID,
		backend.HeaderReplayed: strconv.FormatInt(time.Now().UnixNano(), 10),
	}}
	if err := b.publishReplay(ctx, topic, release); err != nil {
		return 0, fmt.Errorf("bus: release key %q of group %q on %q: %w", key, group, topic, err)
	}
	for i := range msgs {
		if err := b.replay(ctx, in, dlq, &msgs[i], copies[i]); err != nil {
			return i, err
		}
	}
	return len(msgs), nil
}
