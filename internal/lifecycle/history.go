package lifecycle

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/peek"
)

// DefaultScanLimit is how many events Read reads at most when
// Query.Limit is 0.
const DefaultScanLimit = 100_000

// peekPage is how many messages one Inspector.Peek call reads.
const peekPage = 512

// Query selects the history of a message: by its ID, or by its key (every
// message with that key).
type Query struct {
	ID, Key string
	// DeadLetterTopics are searched for the message as it is now; nil
	// means every topic whose oldest message is a dead letter.
	DeadLetterTopics []string
	// Limit bounds how many events of the events topic are read, oldest
	// first (0: DefaultScanLimit).
	Limit int
}

// Entry is one step of a message's history.
type Entry struct {
	Event
	// Source is the topic the entry was read from: the events topic, or
	// the dead-letter topic that holds the message now.
	Source string `json:"source"`
	// Held is set on a dead_lettered entry whose dead letter is still on
	// its dead-letter topic (it was neither replayed nor purged).
	Held bool `json:"held,omitempty"`
}

// History is the timeline of a message, oldest first.
type History struct {
	Entries []Entry `json:"entries"`
	// Scanned is how many events of the events topic were read, and
	// Truncated is set when the scan stopped at the limit before the end.
	Scanned   int  `json:"scanned"`
	Truncated bool `json:"truncated"`
	// EventsMissing is set when the backend lists no events topic (nor
	// a partition of it); with Scanned 0 and EventsMissing unset, the
	// topic is there but empty. Either way the entries come from the
	// dead-letter topics alone.
	EventsMissing bool `json:"events_missing,omitempty"`
}

// ErrNoQuery is returned by Read when the query names neither an ID nor a
// key.
var ErrNoQuery = errors.New("give a message ID or a key")

// Read reads the history of the message that q selects from the events
// topic (and its partitions) and the dead-letter topics. It returns by
// ctx's deadline.
func Read(ctx context.Context, in backend.Inspector, events string, q Query) (History, error) {
	if q.ID == "" && q.Key == "" {
		return History{}, ErrNoQuery
	}
	if err := backend.ValidateTopic(events); err != nil {
		return History{}, err
	}
	if q.Limit <= 0 {
		q.Limit = DefaultScanLimit
	}
	scan, dlqs, found, err := topicsOf(ctx, in, events, q.DeadLetterTopics == nil)
	if err != nil {
		return History{}, err
	}
	if q.DeadLetterTopics != nil {
		dlqs = q.DeadLetterTopics
	}
	h := History{EventsMissing: !found}
	for _, t := range scan {
		if err := h.readEvents(ctx, in, t, &q); err != nil {
			return History{}, fmt.Errorf("events topic %q: %w", t, err)
		}
	}
	for _, t := range dlqs {
		if err := h.readDeadLetters(ctx, in, t, &q); err != nil {
			return History{}, fmt.Errorf("dead-letter topic %q: %w", t, err)
		}
	}
	slices.SortStableFunc(h.Entries, func(a, b Entry) int { return a.Time.Compare(b.Time) })
	return h, nil
}

// topicsOf returns the topics to scan for events (events and its
// partitions), when wanted the topics that hold dead letters, and whether
// the backend lists the events topic or a partition of it.
func topicsOf(ctx context.Context, in backend.Inspector, events string, wantDLQs bool) (scan, dlqs []string, found bool, err error) {
	ts, err := in.Topics(ctx)
	if err != nil {
		return nil, nil, false, err
	}
	scan = []string{events}
	for _, t := range ts {
		if base, _, ok := backend.SplitPartitionTopic(t.Name); ok && base == events {
			scan = append(scan, t.Name)
			found = true
			continue
		}
		if t.Name == events {
			found = true
		}
		if !wantDLQs || t.Name == events {
			continue
		}
		msgs, _, err := in.Peek(ctx, t.Name, "", 1)
		if err != nil {
			return nil, nil, false, fmt.Errorf("peek %q: %w", t.Name, err)
		}
		if len(msgs) > 0 && backend.IsDeadLetter(msgs[0]) {
			dlqs = append(dlqs, t.Name)
		}
	}
	return scan, dlqs, found, nil
}

// readEvents adds the matching events of topic, within the scan limit.
// A line is decoded only when it holds the ID or key sought, as Append
// writes it.
func (h *History) readEvents(ctx context.Context, in backend.Inspector, topic string, q *Query) error {
	var needles [][]byte
	for _, s := range []string{q.ID, q.Key} {
		if s != "" {
			needles = append(needles, appendString(nil, s))
		}
	}
	return peek.All(ctx, in, topic, peekPage, func(m *backend.Message) bool {
		return eachLine(m.Payload, func(line []byte) bool {
			if h.Scanned >= q.Limit {
				h.Truncated = true
				return false
			}
			h.Scanned++
			if !containsAny(line, needles) {
				return true
			}
			e, err := DecodeIn(line, m.Headers)
			if err == nil && q.matches(e.MessageID, e.Key) {
				h.Entries = append(h.Entries, Entry{Event: e, Source: topic})
			}
			return true
		})
	})
}

func containsAny(line []byte, needles [][]byte) bool {
	for _, n := range needles {
		if bytes.Contains(line, n) {
			return true
		}
	}
	return false
}

// readDeadLetters adds the matching dead letters of topic; one that an
// event already records marks that event as held.
func (h *History) readDeadLetters(ctx context.Context, in backend.Inspector, topic string, q *Query) error {
	return peek.All(ctx, in, topic, peekPage, func(m *backend.Message) bool {
		if !backend.IsDeadLetter(m) || !q.matches(m.ID, m.Key) {
			return true
		}
		e := Event{Kind: DeadLettered, MessageID: m.ID, Key: m.Key, DeadLetter: topic,
			Topic: m.Headers[backend.HeaderDeadLetterTopic], Group: m.Headers[backend.HeaderDeadLetterGroup],
			Code: string(backend.ParseDeadLetterCode(m.Headers[backend.HeaderDeadLetterCode])), Error: CutError(m.Headers[backend.HeaderDeadLetterReason])}
		e.Attempt, _ = strconv.Atoi(m.Headers[backend.HeaderDeadLetterAttempt])
		e.Time = m.PublishedAt
		if t, err := time.Parse(time.RFC3339Nano, m.Headers[backend.HeaderDeadLetterTime]); err == nil {
			e.Time = t
		}
		for i := range h.Entries {
			r := &h.Entries[i]
			if r.Kind == DeadLettered && r.MessageID == e.MessageID && r.DeadLetter == topic && r.Attempt == e.Attempt {
				r.Held = true
				return true
			}
		}
		h.Entries = append(h.Entries, Entry{Event: e, Source: topic, Held: true})
		return true
	})
}

func (q *Query) matches(id, key string) bool {
	return q.ID != "" && id == q.ID || q.Key != "" && key == q.Key
}
