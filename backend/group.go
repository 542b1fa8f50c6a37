package backend

import "context"

// GroupCreator is implemented by backends that can create a consumer group
// without joining it. The bus uses it for Bus.CreateGroup; without it the
// bus creates the group through Subscribe (a new group starts at
// StartNewest) and closes the member at once, before any Receive, which
// suits a backend whose Subscribe fetches nothing before Receive.
//
// The conformance suite checks that a group created ahead keeps every
// message published after CreateGroup returned, and that creating an
// existing group leaves it where it stands.
type GroupCreator interface {
	// CreateGroup creates group on topic at the topic's newest position
	// (StartNewest) when it does not exist, so that it keeps what is
	// published after CreateGroup returns, and leaves an existing group
	// where it stands. It creates the topic when the backend stores
	// topics. It returns by ctx's deadline, also on a dead network.
	CreateGroup(ctx context.Context, topic, group string) error
}
