package backend_test

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
)

func TestNewDeadLetterCopiesMessageAndAddsHeaders(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	orig := &backend.Message{ID: "m-1", Key: "k", Headers: map[string]string{"tenant": "a"}, Payload: []byte("p")}
	cp := backend.NewDeadLetter(orig, backend.DeadLetterInfo{
		Topic: "orders", Group: "billing", Attempt: 3, Code: backend.CodeMaxDeliveries,
		Reason: "max deliveries (3) exceeded", Time: at,
	})
	assert.Equal(t, "m-1", cp.ID)
	assert.Equal(t, "k", cp.Key)
	assert.Equal(t, []byte("p"), cp.Payload)
	assert.Equal(t, at, cp.PublishedAt)
	assert.Equal(t, map[string]string{
		"tenant":                        "a",
		backend.HeaderDeadLetterReason:  "max deliveries (3) exceeded",
		backend.HeaderDeadLetterCode:    "max_deliveries",
		backend.HeaderDeadLetterTopic:   "orders",
		backend.HeaderDeadLetterGroup:   "billing",
		backend.HeaderDeadLetterAttempt: "3",
		backend.HeaderDeadLetterID:      "m-1",
		backend.HeaderDeadLetterTime:    "2026-01-02T03:04:05.000000006Z",
	}, cp.Headers)
	assert.Equal(t, map[string]string{"tenant": "a"}, orig.Headers, "the original is not modified")
}

func TestNewDeadLetterCleansReason(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", backend.MaxDeadLetterReason) // 2 bytes per rune
	tests := []struct {
		name, reason, want string
	}{
		{"control characters become spaces", "bad\r\nentry\x00here\x7f", "bad  entry here "},
		{"invalid UTF-8 is replaced", "bad \xff byte", "bad \uFFFD byte"},
		{"attempt below one counts as one", "x", "x"},
	}
	for _, tt := range tests {
		cp := backend.NewDeadLetter(&backend.Message{ID: "m"}, backend.DeadLetterInfo{Reason: tt.reason})
		assert.Equal(t, tt.want, cp.Headers[backend.HeaderDeadLetterReason], tt.name)
		assert.Equal(t, "1", cp.Headers[backend.HeaderDeadLetterAttempt], tt.name)
	}
	cp := backend.NewDeadLetter(&backend.Message{ID: "m"}, backend.DeadLetterInfo{Reason: long})
	got := cp.Headers[backend.HeaderDeadLetterReason]
	require.LessOrEqual(t, len(got), backend.MaxDeadLetterReason, "the reason is capped")
	assert.True(t, utf8.ValidString(got), "the cut is at a rune boundary")
}

// A code stored by an earlier version reads as today's; today's codes and
// codes this version does not know read as they are.
func TestParseDeadLetterCodeReadsEverySpelling(t *testing.T) {
	t.Parallel()
	tests := []struct {
		stored string
		want   backend.DeadLetterCode
	}{
		{"max-deliveries", backend.CodeMaxDeliveries},
		{"lease-lost", backend.CodeLeaseLost},
		{"permanent", backend.CodeRejected},
		{" max-deliveries ", backend.CodeMaxDeliveries},
		{"max_deliveries", backend.CodeMaxDeliveries},
		{"lease_lost", backend.CodeLeaseLost},
		{"rejected", backend.CodeRejected},
		{"expired", backend.CodeExpired},
		{"trimmed", backend.CodeTrimmed},
		{"malformed", backend.CodeMalformed},
		{"oversized", backend.CodeOversized},
		{"a_code_from_a_newer_version", "a_code_from_a_newer_version"},
		{"", ""},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, backend.ParseDeadLetterCode(tt.stored), "stored %q", tt.stored)
	}
}
