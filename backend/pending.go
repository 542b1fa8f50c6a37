package backend

import (
	"context"
	"time"
)

// Pending is one delivery that a consumer group handed out and has not
// settled: leased to a member (this one or another), waiting for its
// redelivery after its lease ran out, or nacked with a delay.
type Pending struct {
	// ID and Key are the message's.
	ID, Key string
	// LeaseEnd is when the delivery may be handed out again (its lease
	// ends, or its delay is over); zero when the backend does not know.
	LeaseEnd time.Time
}

// PendingLister is implemented by subscriptions that can list what their
// group has handed out and not settled. The bus uses it when a
// key-ordered subscription takes the group lock over from a member that
// let it lapse (a crash): it holds back the keys of the listed deliveries
// until each comes back and is handled, in log order, and runs every
// other key at once. Without it the bus waits 1.5 s and one ack timeout
// before it fetches.
type PendingLister interface {
	// PendingDeliveries returns up to max unsettled deliveries of the
	// subscription's group on its topic, those of every member, in log
	// order (the order the group was first handed them), and reports
	// whether that is all of them. It may list a delivery that is settled
	// already (a backend that cannot tell which of a range were settled
	// lists the range), never leave out one that is not. A max below 1
	// is an error wrapping ErrInvalidOption. It returns by ctx's deadline.
	PendingDeliveries(ctx context.Context, max int) (ps []Pending, complete bool, err error)
}
