// Package engine owns the life of a delivery: the in-flight slot taken
// before the backend is asked for messages, the lease and its keep-alive
// (one lease type for every ack mode), the handler's ctx, settlement (ack,
// nack, release, dead letter), ack batching, dispatch to worker
// goroutines, and the ordered shutdown of a subscription.
//
// It imports nothing of the root package. A delivery is a Delivery[P]
// whose Pub field is the public face the root package hands to handlers
// (bus.Delivery, which points back at its record): the engine allocates
// both in one slab per batch and never copies the public face.
//
// # Locks
//
// Each subscription has one mutex (Sub.mu) for the state of its
// deliveries that is not a single atomic word: settlement hooks,
// dead-letter codes, moved lease ends, the heap of manual deliveries
// waiting for settlement, and what the lease keeper knows of running
// handlers. The dispatcher's queue and the acker's buffer have a lock of
// their own each, and none of them is held across backend I/O.
package engine
