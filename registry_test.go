package bus_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus"
)

func TestOpenWithoutSchemeSuggestsOneAndShowsThePort(t *testing.T) {
	_, err := bus.Open(context.Background(), "localhost:6379")
	require.ErrorIs(t, err, bus.ErrInvalidOption)
	assert.Contains(t, err.Error(), `did you mean "redis://localhost:6379"`, "the fix is suggested")
	assert.Contains(t, err.Error(), "localhost:6379", "the port is not masked")
	assert.NotContains(t, err.Error(), "xxxxx")
}
