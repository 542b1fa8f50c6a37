package rabbitmq

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The management API writes an exchange without message stats as an
// empty list; one with them as an object.
func TestExchangeStatsReadAnEmptyListAsNone(t *testing.T) {
	var exs []mgmtExchange
	require.NoError(t, json.Unmarshal([]byte(`[
		{"name": "a", "message_stats": []},
		{"name": "b", "message_stats": {"publish_in": 7}},
		{"name": "c"}
	]`), &exs))
	require.Len(t, exs, 3)
	require.NotNil(t, exs[0].Stats)
	assert.Nil(t, exs[0].Stats.PublishIn, "an empty list holds no figures")
	require.NotNil(t, exs[1].Stats)
	require.NotNil(t, exs[1].Stats.PublishIn)
	assert.Equal(t, int64(7), *exs[1].Stats.PublishIn)
	assert.Nil(t, exs[2].Stats)
	assert.Error(t, json.Unmarshal([]byte(`[{"name": "d", "message_stats": [1]}]`), &exs), "a list with entries is not stats")
}
