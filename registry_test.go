package bus_test

import (
	"context"
	"fmt"
	"net/url"
	"sync"
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

func TestOpenWithMistypedSchemeSuggestsTheURLMeant(t *testing.T) {
	for _, raw := range []string{"redis//127.0.0.1:6379", "redis:127.0.0.1:6379"} {
		_, err := bus.Open(context.Background(), raw)
		require.ErrorIs(t, err, bus.ErrInvalidOption, raw)
		assert.Contains(t, err.Error(), `did you mean "redis://127.0.0.1:6379"`, "%s: the URL meant is suggested", raw)
	}
}

var registerParamScheme sync.Once

// A backend's error that names a bad parameter reaches the caller of Open
// with the parameter's name and the URL's query shown.
func TestOpenKeepsTheNameOfABadParameter(t *testing.T) {
	registerParamScheme.Do(func() {
		bus.Register("paramtest", func(_ context.Context, u *url.URL) (bus.Backend, error) {
			v := u.Query().Get("pool_max_conns")
			return nil, fmt.Errorf("%w: parameter \"pool_max_conns\": %q is not a whole number", bus.ErrInvalidOption, v)
		})
	})
	_, err := bus.Open(context.Background(), "paramtest://bus:s3cret@127.0.0.1:5432/orders?pool_max_conns=abc")
	require.ErrorIs(t, err, bus.ErrInvalidOption)
	assert.Contains(t, err.Error(), `parameter "pool_max_conns": "abc" is not a whole number`, "the parameter is named")
	assert.Contains(t, err.Error(), "?pool_max_conns=abc", "the query is shown")
	assert.NotContains(t, err.Error(), "s3cret", "the password is not")
}
