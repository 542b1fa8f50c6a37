package backend

import (
	"context"
	"time"
)

// ResultStore is implemented by backends that keep a handler's result
// under its message ID for a while (bus.Delivery.SetResult,
// bus.Bus.Result). A backend that sets Capabilities.Results implements
// it. Both methods are safe for concurrent use and return by ctx's
// deadline; after Close they return errors wrapping ErrClosed.
type ResultStore interface {
	// StoreResult stores result under the message id of topic for ttl
	// (at least 1 ms), replacing a result stored there before. result
	// belongs to the caller after the call.
	StoreResult(ctx context.Context, topic, id string, result []byte, ttl time.Duration) error
	// Result returns the result stored under the message id of topic, or
	// found false when there is none: never stored, or its ttl ran out.
	Result(ctx context.Context, topic, id string) (result []byte, found bool, err error)
}

// ResultAcker is implemented by subscriptions that can ack a delivery
// and store its result (as ResultStore.StoreResult, under the
// subscription's topic and the message's id) in one atomic step: either
// both happen or neither does. Without it the bus stores the result and
// then acks, so a crash between the two leaves the result stored and the
// message redelivered, and its handler's next result replaces it.
type ResultAcker interface {
	AckResult(ctx context.Context, ack AckID, id string, result []byte, ttl time.Duration) error
}
