package sqs

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/eventbus-go/bus/backend"
)

func TestFIFOIDsAreValidAndDistinct(t *testing.T) {
	valid := func(t *testing.T, s string) {
		t.Helper()
		assert.LessOrEqual(t, len(s), maxFIFOID, "%q fits AWS's 128 characters", s)
		assert.Regexp(t, `^[!-~]+$`, s, "only printable ASCII, which AWS takes")
	}
	tests := []struct {
		name      string
		m         *backend.Message
		wantGroup string
		wantDedup string
	}{
		{"a key is the group, the ID the dedup ID", &backend.Message{ID: "order-7", Key: "customer-1"}, "customer-1", "order-7"},
		{"no key: the message is a group of its own", &backend.Message{ID: "order-8"}, "order-8", "order-8"},
		{"punctuation is kept", &backend.Message{ID: "a!#$%&()*+,-./:;<=>?@[]^_`{|}", Key: "k:1"}, "k:1", "a!#$%&()*+,-./:;<=>?@[]^_`{|}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			group, dedup := fifoIDs(tt.m)
			assert.Equal(t, tt.wantGroup, group)
			assert.Equal(t, tt.wantDedup, dedup)
		})
	}
	for _, s := range []string{"with space", "é", strings.Repeat("x", 129), "a~b", "\x00", "tab\t"} {
		got := fifoID(s)
		valid(t, got)
		assert.True(t, strings.HasPrefix(got, "~"), "%q is replaced by its hash", s)
	}
	assert.NotEqual(t, fifoID("a b"), fifoID("a_b"), "values that AWS refuses map to distinct IDs")
	assert.Equal(t, fifoID("a b"), fifoID("a b"), "the same value maps to the same ID")
}
