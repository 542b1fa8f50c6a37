package lifecycle

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"time"

	"github.com/eventbus-go/bus/backend"
)

// Bound is the latest scaling decision of one member of a group: its
// in-flight bound after the decision, why, and when.
type Bound struct {
	Topic  string    `json:"topic"`
	Group  string    `json:"group"`
	Member string    `json:"member"`
	Bound  int       `json:"bound"`
	Reason string    `json:"reason"`
	Time   time.Time `json:"time"`
}

// Scaling keeps the latest scaled event of each member, read from an
// events topic (and its partitions). Each Update reads on from where the
// last one stopped, so a dashboard can call it on every refresh. It is
// not safe for concurrent use.
type Scaling struct {
	events string
	// pos is where the next read of each topic of the events topic
	// starts: the cursor of the last page read, and how many of that
	// page's messages were read already (Peek has no cursor past the
	// end, so the last page is read again and the seen part skipped).
	pos    map[string]pagePos
	latest map[string]Bound // by topic, group and member
}

type pagePos struct {
	cursor string
	seen   int
}

// NewScaling returns a Scaling of the events topic events.
func NewScaling(events string) *Scaling {
	return &Scaling{events: events, pos: map[string]pagePos{}, latest: map[string]Bound{}}
}

// Update reads the events published since the last Update (every
// retained one the first time), about limit events at most over all the
// topics of the events topic (it reads whole messages, so the last may
// take it past the limit); it reports whether it stopped at the limit.
// It returns by ctx's deadline.
func (s *Scaling) Update(ctx context.Context, in backend.Inspector, limit int) (truncated bool, err error) {
	scan, _, _, err := topicsOf(ctx, in, s.events, false)
	if err != nil {
		return false, err
	}
	budget := limit
	for _, t := range scan {
		if budget, err = s.read(ctx, in, t, budget); err != nil {
			return false, err
		}
		if budget <= 0 {
			return true, nil
		}
	}
	return false, nil
}

// read reads topic on from its position, within budget events, and
// returns what is left of the budget (0 or less when it ran out).
func (s *Scaling) read(ctx context.Context, in backend.Inspector, topic string, budget int) (int, error) {
	p := s.pos[topic]
	for budget > 0 {
		msgs, next, err := in.Peek(ctx, topic, p.cursor, peekPage)
		if err != nil {
			return budget, err
		}
		for _, m := range msgs[min(p.seen, len(msgs)):] {
			budget -= s.take(m)
			p.seen++
			if budget <= 0 {
				break
			}
		}
		if next == "" || p.seen < len(msgs) || next == p.cursor {
			break
		}
		p = pagePos{cursor: next}
	}
	s.pos[topic] = p
	return budget, nil
}

// scaledKind is how Append starts a scaled event.
var scaledKind = []byte(`{"kind":"scaled"`)

// take keeps the scaled events of m that are later than their member's
// last, and returns how many events m holds.
func (s *Scaling) take(m *backend.Message) int {
	n := 0
	eachLine(m.Payload, func(line []byte) bool {
		n++
		if !bytes.HasPrefix(line, scaledKind) {
			return true
		}
		e, err := DecodeIn(line, m.Headers)
		if err != nil || e.Kind != Scaled {
			return true
		}
		k := e.Topic + "\x00" + e.Group + "\x00" + e.Member
		if old, ok := s.latest[k]; ok && old.Time.After(e.Time) {
			return true
		}
		s.latest[k] = Bound{Topic: e.Topic, Group: e.Group, Member: e.Member, Bound: e.Bound, Reason: e.Reason, Time: e.Time}
		return true
	})
	return n
}

// Of returns the latest bounds of the members of group on topic, by
// member name.
func (s *Scaling) Of(topic, group string) []Bound {
	var out []Bound
	for _, b := range s.latest {
		if b.Topic == topic && b.Group == group {
			out = append(out, b)
		}
	}
	slices.SortFunc(out, func(a, b Bound) int { return strings.Compare(a.Member, b.Member) })
	return out
}
