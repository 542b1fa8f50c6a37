package topiccache_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/internal/topiccache"
)

func TestCacheKeepsTheFirstValueStored(t *testing.T) {
	var c topiccache.Cache[*int]
	_, ok := c.Load("t")
	assert.False(t, ok, "an empty cache has nothing")
	a, b := 1, 2
	assert.Same(t, &a, c.Store("t", &a))
	assert.Same(t, &a, c.Store("t", &b), "a second store returns the value kept first")
	got, ok := c.Load("t")
	require.True(t, ok)
	assert.Same(t, &a, got)
}

func TestCacheStopsGrowingAtMax(t *testing.T) {
	var c topiccache.Cache[int]
	for i := range topiccache.Max + 100 {
		assert.Equal(t, i, c.Store(fmt.Sprint("t", i), i), "Store returns the value to use, kept or not")
	}
	_, ok := c.Load(fmt.Sprint("t", topiccache.Max-1))
	assert.True(t, ok, "topics below the bound are kept")
	_, ok = c.Load(fmt.Sprint("t", topiccache.Max))
	assert.False(t, ok, "topics past the bound are not kept")
}
