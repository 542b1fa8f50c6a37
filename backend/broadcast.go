package backend

import "context"

// GroupDeleter is implemented by backends that can remove a consumer
// group and every state they keep for it. The bus uses it for broadcast
// subscriptions (bus.WithBroadcast), each of which has a group of its
// own: the group is deleted when the subscription closes, and by any
// other broadcast subscription of the topic once the group's lock
// (GroupLocker) has lapsed, which is how a process that died leaves no
// group behind. A backend that sets Capabilities.Broadcast implements
// GroupDeleter, GroupLocker and Inspector.
type GroupDeleter interface {
	// DeleteGroup removes group from topic: its position, the deliveries
	// it has in flight, held or scheduled for redelivery, its group lock
	// and anything else the backend keeps for the group alone, so that
	// Inspector.Groups no longer lists it and nothing it held back stays
	// retained for it. Other groups are untouched. Deleting a group that
	// does not exist is not an error. A member still subscribed to the
	// group may find its settlements stale or its Receive failing, as the
	// backend documents; the bus deletes a group only after its member
	// closed or when its member stopped renewing the group's lock.
	// DeleteGroup returns by ctx's deadline; after Close it returns an
	// error wrapping ErrClosed.
	DeleteGroup(ctx context.Context, topic, group string) error
}
