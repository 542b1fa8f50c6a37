package faultsuite

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
)

// OpenURL returns a Harness.Open that opens a backend with open from
// rawURL, its host replaced by the proxy's address and its query by
// query when query is not empty: a backend built the way an application
// builds it, whose connections all go through the proxy.
func OpenURL[B backend.Backend](rawURL, query string, open func(context.Context, *url.URL) (B, error)) func(testing.TB, string) backend.Backend {
	return func(t testing.TB, addr string) backend.Backend {
		u, err := url.Parse(rawURL)
		require.NoError(t, err)
		u.Host = addr
		if query != "" {
			u.RawQuery = query
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		be, err := open(ctx, u)
		require.NoError(t, err, "open a backend through the proxy")
		return be
	}
}
