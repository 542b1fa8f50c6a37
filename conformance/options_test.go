package conformance

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestWithTimeScaleStretchesEveryDuration(t *testing.T) {
	cfg := config{scale: 1}
	WithTimeScale(2.5)(&cfg)
	assert.Equal(t, 250*time.Millisecond, cfg.dur(100*time.Millisecond), "durations are multiplied by the scale")
	WithTimeScale(0.5)(&cfg)
	assert.Equal(t, 250*time.Millisecond, cfg.dur(100*time.Millisecond), "a scale below 1 is ignored")
}
