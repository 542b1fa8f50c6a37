package backend_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/eventbus-go/bus/backend"
)

func TestSameCopyMatchesIDAndHeaders(t *testing.T) {
	same := backend.SameCopy([]*backend.Message{
		{ID: "a", Headers: map[string]string{"bus-dlq-time": "1"}},
		{ID: "b"},
	})
	assert.True(t, same(&backend.Message{ID: "a", Headers: map[string]string{"bus-dlq-time": "1"}}))
	assert.False(t, same(&backend.Message{ID: "a", Headers: map[string]string{"bus-dlq-time": "2"}}), "a later copy of a")
	assert.False(t, same(&backend.Message{ID: "a"}), "a without headers")
	assert.True(t, same(&backend.Message{ID: "b", Headers: map[string]string{}}), "no headers and empty headers are the same")
	assert.False(t, same(&backend.Message{ID: "b", Headers: map[string]string{"x": ""}}))
	assert.False(t, same(&backend.Message{ID: "c"}))
}
