package backend

import "context"

// Pinger is implemented by backends that can check that their broker
// answers. The bus uses it for Bus.Ping, a readiness probe's check;
// without it Bus.Ping returns an error wrapping bus.ErrUnsupported.
type Pinger interface {
	// Ping makes one round trip to the broker over the backend's own
	// connection (or pool) and returns nil when the broker answered. It
	// returns by ctx's deadline, also on a dead network, with an error
	// wrapping ctx's. After Close it returns an error wrapping ErrClosed.
	// It is safe for concurrent use and changes nothing at the broker.
	Ping(ctx context.Context) error
}
