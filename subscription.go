package bus

import (
	"context"

	"github.com/eventbus-go/bus/internal/partition"
)

// Subscription is a running handler on a topic and group. It is safe for
// concurrent use. It ends when Close is called, when the ctx given to
// Subscribe ends, when the bus closes, or when the backend fails for good
// (see Err).
type Subscription struct {
	topic, group string
	member       string // names the member in lifecycle events
	// run is the consumer of an unpartitioned topic, or the partition
	// manager (also in parts) of a partitioned one.
	run   runner
	parts *partition.Manager // the partitions of a partitioned topic; nil otherwise
	bus   *Bus
	// health records how fetching goes (health.go).
	health health
}

// runner is what runs a subscription: the consumer of one topic,
// or the partition manager for a partitioned one.
type runner interface {
	Done() <-chan struct{}
	Err() error
	Close(ctx context.Context) error
	Force(cause error)
}

// startRun starts an unpartitioned subscription (a partitioned one runs
// from partition.Start on).
func (s *Subscription) startRun() {
	if c, ok := s.run.(*consumer); ok {
		c.Start()
	}
}

// discard gives up a subscription the closing bus will not run.
func (s *Subscription) discard() {
	if c, ok := s.run.(*consumer); ok {
		c.Discard()
		return
	}
	_ = s.parts.Close(context.Background())
}

// Group returns the subscription's consumer group: the one WithGroup
// named (default "default"), or a broadcast subscription's own
// (WithBroadcast).
func (s *Subscription) Group() string { return s.group }

// Done is closed when the subscription has fully stopped.
func (s *Subscription) Done() <-chan struct{} { return s.run.Done() }

// Err returns the error that ended the subscription: nil while it runs and
// after a clean Close, otherwise why it stopped.
func (s *Subscription) Err() error { return s.run.Err() }

// Close stops the subscription, like net/http.Server.Shutdown:
//  1. it stops fetching;
//  2. it lets in-flight handlers finish until ctx ends, then cancels their
//     ctx with cause ErrClosing;
//  3. it flushes settlements;
//  4. it returns when no handler of the subscription runs, or when ctx
//     ends (plus a short grace), whichever comes first.
//
// When the handlers finished before ctx ended, Close then has the
// backend remove what every group of the topic has settled (within a
// second), so that a consumer that settled everything and exits leaves
// nothing of it behind; see docs/backends.md, Retention.
//
// Close never blocks past ctx, on every path: also when the shutdown was
// started by the Subscribe ctx ending or by a backend failure, and when
// Close is called twice or concurrently. Whichever Close's ctx ends first
// cancels the running handlers. A delivery whose handler the shutdown
// cancelled is given back to the group without counting as an attempt
// (see ErrClosing). Handlers that ignore their cancelled ctx are counted
// in the error, their late settlements are dropped, and their messages
// come back after the lease; the dropped settlements are counted and
// reported to the observer once, as one ScopeLease event, when the last
// of those handlers has returned. Done is closed
// when the last handler has returned. A Close that did not start the
// shutdown returns nil once Done is closed, or an error when its ctx ends
// first. A handler must not call Close on its own subscription (Close
// would wait for it until ctx ends); it can cancel the ctx given to
// Subscribe instead.
func (s *Subscription) Close(ctx context.Context) error { return s.run.Close(ctx) }

// Waiting returns how many deliveries of a key-ordered subscription
// (WithKeyOrdering) wait for their key now, behind a head that runs or
// waits for its retry: at most the WithMaxWaiting bound, summed over the
// partitions the member owns. They hold no in-flight slot; at the broker
// they are pending (bus groups counts them in PENDING). 0 without key
// ordering.
func (s *Subscription) Waiting() int {
	if s.parts == nil {
		return waitingOf(s.run)
	}
	n := 0
	for _, r := range s.parts.Runners() {
		n += waitingOf(r)
	}
	return n
}

// waitingOf is the Waiting count of a consumer, 0 for any other runner.
func waitingOf(r any) int {
	if c, ok := r.(*consumer); ok {
		return c.Waiting()
	}
	return 0
}
