package bus

import (
	"context"
	"fmt"
	"maps"
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
	for _, m := range picked {
		dl := decodeDeadLetter(m)
		if err := b.replay(ctx, in, dlq, &dl); err != nil {
			return replayed, err
		}
		replayed++
	}
	return replayed, notFound("replay dead letters of", dlq, missing)
}

// replay publishes one dead letter to its original topic, then removes it
// from dlq.
func (b *Bus) replay(ctx context.Context, in backend.Inspector, dlq string, dl *DeadLetter) error {
	if dl.Topic == "" {
		return fmt.Errorf("bus: replay dead letter %q of %q: %w: it names no original topic", dl.ID, dlq, ErrInvalidMessage)
	}
	m := dl.Message
	m.Headers = maps.Clone(m.Headers)
	at := time.Now()
	m.Headers[backend.HeaderReplayed] = strconv.FormatInt(at.UnixNano(), 10)
	if err := b.publishReplay(ctx, dl.Topic, &m); err != nil {
		return fmt.Errorf("bus: replay dead letter %q of %q to %q: %w", dl.ID, dlq, dl.Topic, err)
	}
	if _, err := in.Delete(ctx, dlq, []string{dl.ID}); err != nil {
		return fmt.Errorf("bus: replay dead letter %q: stored on %q, but not removed from %q: %w", dl.ID, dl.Topic, dlq, err)
	}
	b.emitReplayed(dlq, dl, at)
	return nil
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
		if !strings.HasPrefix(strings.ToLower(k), "bus-dlq-") {
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
	if t, err := time.Parse(time.RFC3339Nano, m.Headers[backend.HeaderDeadLetterTime]); err == nil {
		dl.Time = t
	} else {
		dl.Time = m.PublishedAt
	}
	return dl
}
