package postgres

import (
	"context"
	"net/url"
	"time"
)

// TrimDeleteSQL is the trim's delete, for a test of its plan.
var TrimDeleteSQL = trimDeleteSQL

// LockTopic and TopicLock name a topic's advisory lock, for a test that
// holds it as a new group does.
const LockTopic = lockTopic

var TopicLock = topicLock

// ForceClaims makes every Publish of be use the statement that may
// notify (force 1), or every one to a topic that a publish claimed
// before (and forget did not reset) the lean one (force -1); 0 restores
// the default.
func ForceClaims(be *Backend, force int) {
	be.notes.mu.Lock()
	be.notes.force = force
	be.notes.mu.Unlock()
}

// EndLostFetch ends, as a Receive after a lost fetch does, the fetch
// that server process pid may still run on a connection the client
// closed at lostAt, and waits until it has ended.
func EndLostFetch(ctx context.Context, be *Backend, pid uint32, lostAt time.Time) error {
	return be.lostEnded(ctx, lostFetch{tag: 1, pid: pid, at: lostAt}, time.Minute)
}

// ConnectTimeoutOf returns the connect timeout OpenURL applies to u,
// reading it without I/O.
func ConnectTimeoutOf(u *url.URL) (time.Duration, error) {
	_, cfg, err := parseURL(u)
	if err != nil {
		return 0, err
	}
	return cfg.ConnConfig.ConnectTimeout, nil
}
