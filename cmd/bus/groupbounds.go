package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/lifecycle"
)

// groupRow is a group as bus groups prints it: with --events, the latest
// in-flight bound of each member that autoscales (bus.WithAutoscale), from
// the scaled events on the events topic.
type groupRow struct {
	bus.GroupInfo
	Bounds []lifecycle.Bound `json:"bounds,omitempty"`
	// HeldKeys counts the keys the group holds (bus.KeyHold).
	HeldKeys int `json:"held_keys,omitempty"`
}

// rowsOf wraps gs without bounds.
func rowsOf(gs []bus.GroupInfo) []groupRow {
	rows := make([]groupRow, len(gs))
	for i, g := range gs {
		rows[i] = groupRow{GroupInfo: g}
	}
	return rows
}

// withBounds reads the scaled events of the events topic on the backend
// of rawURL (at most limit of its messages) and gives each row of topic's
// groups the bounds of its members: on a partitioned topic the bound of
// the partition's owner, else of every member. It reports whether the
// read stopped at the limit.
func withBounds(ctx context.Context, rawURL, events, topic string, rows []groupRow, limit int) (bool, error) {
	in, done, err := openInspector(ctx, rawURL)
	if err != nil {
		return false, err
	}
	defer done()
	sc := lifecycle.NewScaling(events)
	truncated, err := sc.Update(ctx, in, limit)
	if err != nil {
		return false, fmt.Errorf("read the events topic %q: %w", events, err)
	}
	if base, _, ok := bus.SplitPartitionTopic(topic); ok && bus.ValidateTopic(base) == nil {
		topic = base // events name the topic, not the partition
	}
	for i := range rows {
		rows[i].Bounds = boundsOf(sc, topic, &rows[i].GroupInfo)
	}
	return truncated, nil
}

// boundsOf returns the bounds g shows: the owner's on a partition, every
// member's otherwise.
func boundsOf(sc *lifecycle.Scaling, topic string, g *bus.GroupInfo) []lifecycle.Bound {
	all := sc.Of(topic, g.Name)
	if g.Partitions == 0 {
		return all
	}
	for _, b := range all {
		if b.Member == g.Owner {
			return []lifecycle.Bound{b}
		}
	}
	return nil
}

// fmtBounds is the BOUND cell of a row: each member's bound with the
// reason and time of its last decision.
func fmtBounds(bs []lifecycle.Bound, withMember bool) string {
	if len(bs) == 0 {
		return "-"
	}
	parts := make([]string, len(bs))
	for i, b := range bs {
		parts[i] = strconv.Itoa(b.Bound) + " (" + b.Reason + " " + fmtTime(b.Time) + ")"
		if withMember {
			parts[i] = b.Member + ": " + parts[i]
		}
	}
	return strings.Join(parts, ", ")
}

// printBoundsNote tells how the bounds were read.
func printBoundsNote(w io.Writer, events string, truncated bool, limit int) {
	if truncated {
		fmt.Fprintf(w, "bus groups: read the first %d messages of %s only; bounds may be older than shown (raise --events-limit)\n", limit, events)
	}
}

// uiBoundsLimit bounds how many events one dashboard sample reads.
const uiBoundsLimit = 100_000

// addBounds reads the scaled events published since the last sample (all
// of them the first time) and gives each group of snap its members'
// bounds. It does nothing without an inspector.
func (u *uiServer) addBounds(ctx context.Context, snap *snapshot) error {
	if u.inspector == nil || u.events == "" {
		return nil
	}
	if u.scaling == nil {
		u.scaling = lifecycle.NewScaling(u.events)
	}
	if _, err := u.scaling.Update(ctx, u.inspector, uiBoundsLimit); err != nil {
		return fmt.Errorf("read the events topic %q: %w", u.events, err)
	}
	for i := range snap.Topics {
		t := &snap.Topics[i]
		topic := t.Name
		if base, _, ok := bus.SplitPartitionTopic(topic); ok && bus.ValidateTopic(base) == nil {
			topic = base
		}
		for j := range t.Groups {
			if bs := boundsOf(u.scaling, topic, &t.Groups[j]); len(bs) > 0 {
				if t.Bounds == nil {
					t.Bounds = map[string][]lifecycle.Bound{}
				}
				t.Bounds[t.Groups[j].Name] = bs
			}
		}
	}
	return nil
}
