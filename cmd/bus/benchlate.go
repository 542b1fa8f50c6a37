package main

import (
	"context"
	"time"

	"github.com/eventbus-go/bus"
)

// backlogger is a target that can count what its group still has to
// handle at the broker: messages not yet received, received but not
// settled, and scheduled ones.
type backlogger interface {
	// backlog returns the count, and false when the broker cannot tell.
	backlog(ctx context.Context) (int64, bool)
}

// splitLate moves from res.Lost to res.Late the messages that did not
// arrive by the end of the run but that the broker still holds for the
// run's group: they are late, not lost. What is left in Lost never
// arrived and is not held either. A target that cannot count (a raw
// client, a backend with unknown figures) leaves Lost as it is.
func (r *benchRun) splitLate(ctx context.Context, res *benchResult) {
	if res.Lost <= 0 {
		return
	}
	bl, ok := r.t.(backlogger)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	held, known := bl.backlog(ctx)
	if !known {
		return
	}
	res.Late = min(res.Lost, held)
	res.Lost -= res.Late
}

// backlog counts the lag, the pending and the scheduled messages of the
// run's group on its topic (and its partitions).
func (t *busTarget) backlog(ctx context.Context) (int64, bool) {
	gs, err := t.b.Groups(ctx, t.r.topic)
	if err != nil {
		return 0, false
	}
	group := t.group()
	var n int64
	found := false
	for _, g := range gs {
		if g.Name != group {
			continue
		}
		if !g.Lag.Known() || !g.Pending.Known() {
			return 0, false
		}
		n += int64(g.Lag) + int64(g.Pending)
		found = true
	}
	ts, err := t.b.Topics(ctx)
	if err != nil {
		return 0, false
	}
	for _, tp := range ts {
		base, _, part := bus.SplitPartitionTopic(tp.Name)
		if (tp.Name == t.r.topic || part && base == t.r.topic) && tp.Scheduled > 0 {
			n += int64(tp.Scheduled)
		}
	}
	return n, found
}
