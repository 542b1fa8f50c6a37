package redisstream

import (
	"context"
	"time"
)

// A read lingers (see linger.due) only after one that found at least
// readLingerMin entries while they arrived at readLingerRate or more.
const (
	// readLingerMin: a read that found fewer met a quiet stream, where
	// waiting would add latency and save next to no reads.
	readLingerMin = 8
	// readLingerRate, in entries a second over the last two reads: below
	// it the reads are not what bounds the subscription (at 20,000 a
	// second they take each publisher's batch as it comes), and a wait
	// would only add latency. Two reads, because a read that was woken by
	// the first entry of a batch finds one, and the one right after it
	// finds the rest of the batch within a round trip: either alone
	// misjudges the rate.
	readLingerRate = 50_000
)

// linger decides whether a subscription's next XREADGROUP waits
// Options.ReadLinger first, from what its last two reads found and when
// they started, and waits. Receive's goroutine only.
type linger struct {
	// found and asked are the entries the last read found and the COUNT
	// it asked for, started when it started; prevFound and prevStarted
	// are the same of the read before it.
	found, asked int
	started      time.Time
	prevFound    int
	prevStarted  time.Time
	timer        *time.Timer
}

// due reports whether a read that starts at now waits d first: when the
// last read found a busy stream, with at least readLingerMin entries, at
// readLingerRate or more over the last two reads, and fewer than half of
// its COUNT. Entries then arrive about as fast as they are read, so each
// read would take a few, paying a round trip and a wakeup of the server's
// blocked-client path for each handful; after the wait one read takes
// what arrived meanwhile. No other read is delayed: not on a quiet or
// moderately busy stream, where a message must not wait, nor on a
// backlog (half its COUNT or more), where the next read finds entries at
// once. A d of 0 or less turns lingering off.
func (l *linger) due(now time.Time, d time.Duration) bool {
	return d > 0 && l.found >= readLingerMin && 2*l.found < l.asked &&
		float64(l.prevFound+l.found) >= readLingerRate*now.Sub(l.prevStarted).Seconds()
}

// wait waits d, or until ctx ends, which it returns ctx.Err() for.
func (l *linger) wait(ctx context.Context, d time.Duration) error {
	if l.timer == nil {
		l.timer = time.NewTimer(d)
	} else {
		l.timer.Reset(d)
	}
	select {
	case <-l.timer.C:
		return nil
	case <-ctx.Done():
		l.timer.Stop()
		return ctx.Err()
	}
}

// beforeRead waits d when due (see due) and returns the time the read
// starts, which it records; the wait ends early, with ctx.Err(), when ctx
// ends.
func (l *linger) beforeRead(ctx context.Context, d time.Duration) (time.Time, error) {
	now := time.Now()
	if l.due(now, d) {
		if err := l.wait(ctx, d); err != nil {
			return now, err
		}
		now = time.Now()
	}
	l.prevFound, l.prevStarted, l.started = l.found, l.started, now
	return now, nil
}

// read records the COUNT of the read that beforeRead started, before any
// entry is found.
func (l *linger) read(asked int) { l.found, l.asked = 0, asked }

// took records the entries the read found.
func (l *linger) took(n int) { l.found = n }
