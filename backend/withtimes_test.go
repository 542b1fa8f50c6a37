package backend_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/eventbus-go/bus/backend"
)

func TestWithTimesCarriesTimesInACopy(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	h := map[string]string{"a": "1"}

	assert.Equal(t, h, backend.WithTimes(h, time.Time{}, time.Time{}, now), "no times: the headers as they are")
	assert.Equal(t, h, backend.WithTimes(h, now, time.Time{}, now), "a DeliverAt not after now is not carried")

	got := backend.WithTimes(h, now.Add(time.Second), now.Add(time.Hour), now)
	deliver, ok := backend.HeaderTime(got, backend.HeaderDeliverAt)
	assert.True(t, ok)
	assert.True(t, deliver.Equal(now.Add(time.Second)), "DeliverAt reads back: %v", deliver)
	expires, ok := backend.HeaderTime(got, backend.HeaderExpiresAt)
	assert.True(t, ok)
	assert.True(t, expires.Equal(now.Add(time.Hour)), "ExpiresAt reads back: %v", expires)
	assert.Equal(t, "1", got["a"], "the caller's headers are kept")
	assert.Equal(t, map[string]string{"a": "1"}, h, "the caller's map is not written")
}
