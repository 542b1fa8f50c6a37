package postgres_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eventbus-go/bus/backend"
	"github.com/eventbus-go/bus/conformance"
	"github.com/eventbus-go/bus/internal/testkit/pgtest"
	"github.com/eventbus-go/bus/postgres"
)

// TestConformance runs the whole suite on one private server; each case
// opens a backend (and a pool) of its own on it.
func TestConformance(t *testing.T) {
	srv := pgtest.Start(t)
	u, err := url.Parse(srv.URL())
	require.NoError(t, err)
	conformance.Run(t, func(t testing.TB) backend.Backend {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		b, err := postgres.OpenURL(ctx, u)
		require.NoError(t, err, "open the backend")
		return b
	})
}
