package recvbuf_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/internal/recvbuf"
)

// Next hands out the same structs again, zeroed, and drops every
// reference the last call's messages held, beyond n too.
func TestNextReusesAndClearsTheLastCallsMessages(t *testing.T) {
	var b recvbuf.Buffer
	vals, out := b.Next(3)
	require.Len(t, vals, 3)
	assert.Empty(t, out)
	assert.GreaterOrEqual(t, cap(out), 3)
	for i := range vals {
		vals[i] = backend.Message{ID: "m", Payload: []byte("p"), Headers: map[string]string{"k": "v"}}
		out = append(out, &vals[i])
	}
	first := &vals[0]

	vals, out = b.Next(2)
	require.Len(t, vals, 2)
	assert.Same(t, first, &vals[0], "the structs are reused")
	assert.Equal(t, backend.Message{}, vals[0], "handed out zeroed")
	assert.Empty(t, out)
	all := vals[:3] // the third, beyond this call's n
	assert.Equal(t, backend.Message{}, all[2], "what the last call left beyond n is cleared too")
	assert.Nil(t, out[:3][2], "and so are its pointers")

	vals, _ = b.Next(5)
	assert.Len(t, vals, 5, "grows when more are asked for")
}

// Overwrite hands out the same structs as they were (the caller assigns
// each whole) and clears only what the last call left beyond n.
func TestOverwriteClearsOnlyBeyondN(t *testing.T) {
	var b recvbuf.Buffer
	vals, _ := b.Overwrite(3)
	require.Len(t, vals, 3)
	for i := range vals {
		vals[i] = backend.Message{ID: "m", Payload: []byte("p")}
	}
	first := &vals[0]

	vals, out := b.Overwrite(2)
	require.Len(t, vals, 2)
	assert.Empty(t, out)
	assert.Same(t, first, &vals[0], "the structs are reused")
	assert.Equal(t, "m", vals[0].ID, "handed out as left: the caller overwrites them")
	assert.Equal(t, backend.Message{}, vals[:3][2], "what the last call left beyond n is cleared")

	vals, _ = b.Overwrite(5)
	assert.Len(t, vals, 5, "grows when more are asked for")
	assert.Equal(t, backend.Message{}, vals[4], "grown structs are zero")
}
