package postgres

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestClaimTakesOverAskedNotification: a publish that claims a topic's
// notification takes over one asked for after an earlier commit (the
// notifier no longer sends it), and only that topic's.
func TestClaimTakesOverAskedNotification(t *testing.T) {
	n := newNotifier()
	claimed, covered := n.claim("a")
	assert.True(t, claimed, "the first publish of a topic claims")
	assert.False(t, covered, "nothing was asked for")
	claimed, _ = n.claim("a")
	assert.False(t, claimed, "a publish within notifyEvery of the claim does not")

	n.later("a")
	n.later("b")
	n.mu.Lock()
	n.last["a"] = time.Now().Add(-notifyEvery)
	n.last["b"] = time.Now().Add(-notifyEvery)
	n.mu.Unlock()
	claimed, covered = n.claim("a")
	assert.True(t, claimed)
	assert.True(t, covered, "the claim takes over a's notification")
	topics, _ := n.due()
	assert.Equal(t, []string{"b"}, topics, "the notifier sends b's only")
}
