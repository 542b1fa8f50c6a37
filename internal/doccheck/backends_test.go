package doccheck

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/inmemory"
	"github.com/eventbus-go/bus/nats"
	"github.com/eventbus-go/bus/postgres"
	"github.com/eventbus-go/bus/redisstream"
)

// shipped are the backends of this repository, by the name the docs give
// them.
var shipped = []struct {
	name string
	be   any
}{
	{"mem", (*inmemory.Backend)(nil)},
	{"Redis", (*redisstream.Backend)(nil)},
	{"NATS", (*nats.Backend)(nil)},
	{"PostgreSQL", (*postgres.Backend)(nil)},
}

// excerpt returns the text of file from the first from up to the next
// until, with comment markers and line breaks folded into spaces.
func excerpt(t *testing.T, file, from, until string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root(t), file))
	require.NoError(t, err)
	text := regexp.MustCompile(`\n\s*(// ?)?`).ReplaceAllString(string(data), " ")
	i := strings.Index(text, from)
	require.GreaterOrEqual(t, i, 0, "%s: %q not found", file, from)
	j := strings.Index(text[i+len(from):], until)
	require.GreaterOrEqual(t, j, 0, "%s: %q not found after %q", file, until, from)
	return text[i : i+len(from)+j]
}

// Where the docs list the backends, every shipped backend is named; where
// they list those that implement an optional interface, exactly those
// that implement it are.
func TestBackendListsNameEveryShippedBackend(t *testing.T) {
	all := []struct{ file, from, until string }{
		{"doc.go", "Package bus gives", "# Opening"},
		{"doc.go", "# Opening a bus", "New wraps"},
		{"registry.go", "Open opens the backend", "returns a Bus"},
		{"README.md", "One Go API", "## Install"},
		{"docs/watermill.md", "`NewPublisher` and `NewSubscriber` implement", "with the bus's retries"},
	}
	schemes := map[string]string{"mem": "mem://", "Redis": "redis://", "NATS": "nats://", "PostgreSQL": "postgres://"}
	for _, tt := range all {
		text := excerpt(t, tt.file, tt.from, tt.until)
		for _, s := range shipped {
			assert.True(t, strings.Contains(text, s.name) || strings.Contains(text, schemes[s.name]) || s.name == "mem" && strings.Contains(text, "in-process"),
				"%s (%q...): %s is not listed", tt.file, tt.from, s.name)
		}
	}
	lists := []struct {
		file, from, until string
		implements        func(any) bool
	}{
		{"options.go", "backend.GroupLocker:", ")", func(b any) bool { _, ok := b.(backend.GroupLocker); return ok }},
		{"docs/operating.md", "optional `backend.Inspector` (", ";", func(b any) bool { _, ok := b.(backend.Inspector); return ok }},
		{"docs/operating.md", "that implements `backend.TopicDeleter`, i.e.", ", so", func(b any) bool { _, ok := b.(backend.TopicDeleter); return ok }},
		{"docs/operating.md", "optional `backend.Pinger` (", ";", func(b any) bool { _, ok := b.(backend.Pinger); return ok }},
		{"broadcast.go", "needs Capabilities.Broadcast (", ";", func(b any) bool { _, ok := b.(backend.GroupDeleter); return ok }},
		{"result.go", "needs Capabilities.Results (", ")", func(b any) bool { _, ok := b.(backend.ResultStore); return ok }},
	}
	for _, l := range lists {
		text := excerpt(t, l.file, l.from, l.until)
		for _, s := range shipped {
			assert.Equal(t, l.implements(s.be), strings.Contains(text, s.name), "%s (%q...): is %s listed as it implements it?", l.file, l.from, s.name)
		}
	}
	snooze := excerpt(t, "docs/semantics.md", "`backend.Snoozer` (", ";")
	for _, s := range shipped {
		assert.Contains(t, snooze, s.name, "docs/semantics.md: the backends with backend.Snoozer")
	}
}

// The docs write the settlement calls with their real arguments: a
// Delivery d takes a delay, never itself.
func TestDocsWriteTheSettlementCallsAsTheyAre(t *testing.T) {
	for _, path := range documents(t) {
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		for _, bad := range []string{"d.Nack(ctx, d)", "d.Snooze(ctx, d)"} {
			assert.False(t, strings.Contains(string(data), bad), "%s writes %s: a Delivery d takes a delay, not itself", filepath.Base(path), bad)
		}
	}
}
