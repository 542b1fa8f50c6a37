package msgcheck

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCheckRefusesTimesOutsideTheCarriedRange(t *testing.T) {
	tests := []struct {
		name     string
		at       time.Time
		accepted bool
	}{
		{"zero", time.Time{}, true},
		{"now", time.Now(), true},
		{"the first", MinTime, true},
		{"the last", MaxTime, true},
		{"the last with nanoseconds cut to it", time.Unix(0, math.MaxInt64), true},
		{"a millisecond past the last", MaxTime.Add(time.Millisecond), false},
		{"a nanosecond before the first", MinTime.Add(-time.Nanosecond), false},
		{"2^62 seconds", time.Unix(1<<62, 0), false},
		{"-2^62 seconds", time.Unix(-1<<62, 0), false},
		{"year 9999", time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, f := range []Fields{
				{ID: "a", MaxPayload: 1, DeliverAt: tt.at},
				{ID: "a", MaxPayload: 1, ExpiresAt: tt.at},
			} {
				field := "DeliverAt"
				if f.DeliverAt.IsZero() && !tt.at.IsZero() {
					field = "ExpiresAt"
				}
				err := Check(f)
				if tt.accepted {
					assert.NoError(t, err, "%s %v is carried", field, tt.at)
					continue
				}
				require.ErrorIs(t, err, ErrInvalidMessage, "%s %v is refused", field, tt.at)
				assert.Contains(t, err.Error(), field, "the error names the field")
			}
		})
	}
}

func TestTheCarriedRangeFitsInt64Nanoseconds(t *testing.T) {
	assert.Equal(t, MaxTime.UnixMilli()*int64(time.Millisecond), MaxTime.UnixNano(), "MaxTime in nanoseconds does not wrap")
	assert.Equal(t, MinTime.UnixMilli()*int64(time.Millisecond), MinTime.UnixNano(), "MinTime in nanoseconds does not wrap")
	assert.Greater(t, MaxTime.UnixNano(), int64(0))
	assert.Less(t, MinTime.UnixNano(), int64(0))
	assert.Less(t, float64(MaxTime.UnixMilli()), float64(1<<53), "Redis scores (float64 ms) hold it exactly")
}
