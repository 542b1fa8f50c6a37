package median_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/eventbus-go/bus/internal/median"
)

func TestOfTakesTheMiddleAndLeavesOutZeros(t *testing.T) {
	id := func(v float64) float64 { return v }
	assert.InDelta(t, 3, median.Of([]float64{5, 1, 3}, id), 1e-9, "odd count: the middle value")
	assert.InDelta(t, 2.5, median.Of([]float64{1, 4, 2, 3}, id), 1e-9, "even count: mean of the middle two")
	assert.InDelta(t, 4, median.Of([]float64{0, 4, 0}, id), 1e-9, "zeros are left out")
	assert.Zero(t, median.Of([]float64{0, 0}, id), "no measured value")
	assert.Zero(t, median.Of([]float64(nil), id), "no value at all")
}
