package middleware

import (
	"github.com/eventbus-go/bus"
	"github.com/eventbus-go/bus/internal/engine"
)

// Outcome is how a delivery was settled.
type Outcome = engine.Outcome

// The outcomes of a delivery; Outcome.String names them "pending", "ack",
// "nack", "dead_letter", "dropped" and "expired".
const (
	// OutcomePending: not settled yet.
	OutcomePending = engine.OutcomePending
	// OutcomeAcked: acked; it will not be delivered to the group again.
	OutcomeAcked = engine.OutcomeAcked
	// OutcomeNacked: handed back for redelivery (after a delay), or
	// released by a shutdown.
	OutcomeNacked = engine.OutcomeNacked
	// OutcomeDeadLettered: moved to the dead-letter topic.
	OutcomeDeadLettered = engine.OutcomeDeadLettered
	// OutcomeDropped: rejected with dead-lettering off; acked and dropped.
	OutcomeDropped = engine.OutcomeDropped
	// OutcomeExpired: the lease ran out before it was settled (AckManual);
	// the backend redelivers it.
	OutcomeExpired = engine.OutcomeExpired
)

// OnSettle registers fn to be called once, with the outcome and the error
// of the settlement, when d is settled (or its lease expires). If d is
// already settled fn is called at once. Middleware uses it to end spans
// and count outcomes. On a Delivery that did not come from a subscription
// fn is never called.
func OnSettle(d *bus.Delivery, fn func(Outcome, error)) {
	if r := engine.SettledOf(d); r != nil {
		r.OnSettle(fn)
	}
}

// OutcomeOf returns how d was settled so far.
func OutcomeOf(d *bus.Delivery) Outcome {
	if r := engine.SettledOf(d); r != nil {
		return r.Outcome()
	}
	return OutcomePending
}

// DeadLetterCodeOf is the reason code of a delivery that was
// dead-lettered (or dropped with dead-lettering off), and "" otherwise.
// Read it in an OnSettle hook, for example to label metrics.
func DeadLetterCodeOf(d *bus.Delivery) bus.DeadLetterCode {
	if r := engine.SettledOf(d); r != nil {
		return r.DeadLetterCode()
	}
	return ""
}
