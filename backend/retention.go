package backend

import (
	"context"
	"time"
)

// RetentionBound caps what a topic retains by age and by length, whatever
// its groups have settled. A zero field is no cap of that kind.
type RetentionBound struct {
	// MaxAge drops messages published longer ago than MaxAge.
	MaxAge time.Duration
	// MaxLen keeps about the newest MaxLen messages.
	MaxLen int64
}

// RetentionBounder is implemented by backends that can cap a topic's
// retention on their own, with no subscriber running. The bus uses it
// for the lifecycle events topic (bus.WithEvents), which no group may
// ever settle.
//
// BoundRetention applies b to topic from now on, for this Backend's
// publishes and background work, and replaces an earlier bound of the
// topic. A bounded topic holds, shortly after each publish or within the
// backend's trim interval, no message older than MaxAge and about no more
// than MaxLen messages; the backend documents how close "about" is. A
// bound may drop messages some group has not settled. BoundRetention
// returns by ctx's deadline and may be called again with the same bound
// (a retry after an error); it is safe for concurrent use.
type RetentionBounder interface {
	BoundRetention(ctx context.Context, topic string, b RetentionBound) error
}

// SettledTrimmer is implemented by backends that keep what every group
// has settled until a trim removes it (rather than at each settlement).
// The bus calls TrimSettled when a subscription's Close ran its course
// (its ctx did not end first), after the subscription's settlements were
// flushed and its backend Subscription closed, so that a consumer that
// settled everything and exits leaves nothing of it behind.
//
// TrimSettled removes, of topic, what every group of the topic has
// settled and nothing else, under the backend's retention option (a
// backend configured to keep everything removes nothing). It returns by
// ctx's deadline and is safe for concurrent use.
type SettledTrimmer interface {
	TrimSettled(ctx context.Context, topic string) error
}
