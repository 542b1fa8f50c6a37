package observer

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Outage reports the background errors of one activity (a reclaim loop, a
// connection, a fetch loop) by the policy every backend shares: the first
// error of an outage, and its recovery, never a flood. While an outage
// lasts further errors are only counted; the recovery event has a nil Err
// and says how long the outage lasted and how many errors it hid.
//
// The zero value is ready to use. It is safe for concurrent use.
type Outage struct {
	mu         sync.Mutex
	failing    bool
	since      time.Time
	suppressed int
}

// Fail records err. On the first error of an outage it reports e with Err
// set to err and returns true; during an outage it only counts the error
// and returns false. A nil err is ignored.
func (o *Outage) Fail(ctx context.Context, obs Observer, e Event, err error) bool {
	if err == nil {
		return false
	}
	o.mu.Lock()
	if o.failing {
		o.suppressed++
		o.mu.Unlock()
		return false
	}
	o.failing, o.since, o.suppressed = true, time.Now(), 0
	o.mu.Unlock()
	e.Err = err
	obs.Observe(ctx, e)
	return true
}

// Recover ends an outage. If one was in progress it reports e with a nil
// Err and a Recovery that says how long it lasted and how many errors were
// not reported, and returns true; otherwise it does nothing.
func (o *Outage) Recover(ctx context.Context, obs Observer, e Event) bool {
	o.mu.Lock()
	if !o.failing {
		o.mu.Unlock()
		return false
	}
	r := &Recovery{Duration: time.Since(o.since), Suppressed: o.suppressed}
	o.failing, o.suppressed = false, 0
	o.mu.Unlock()
	e.Err, e.Recovery = nil, r
	obs.Observe(ctx, e)
	return true
}

// Failing reports whether an outage is in progress.
func (o *Outage) Failing() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.failing
}

// Recovery describes an outage that ended; it is set on the event Outage
// reports when the activity works again.
type Recovery struct {
	// Duration is the time from the first error to the recovery.
	Duration time.Duration
	// Suppressed counts the errors after the first that were not reported.
	Suppressed int
}

// String returns a short text such as "recovered after 1.5s (3 more errors)".
func (r *Recovery) String() string {
	return fmt.Sprintf("recovered after %v (%d more errors)", r.Duration.Round(time.Millisecond), r.Suppressed)
}
