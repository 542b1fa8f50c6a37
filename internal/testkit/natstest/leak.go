package natstest

import "go.uber.org/goleak"

// LeakIgnores lists goroutines of the embedded nats-server that goleak
// must not count as the package's own leaks:
//
//   - Start.func1 lingers for a moment after Shutdown returns;
//   - a clustered server that applies a stream assignment while it shuts
//     down (a node stopped under load, or the cleanup of a cluster) can
//     open that stream's file store after its streams were stopped, and the
//     store's flush loop and its registration with the server's shared
//     access-time service then stay until the process exits.
//
// They belong to the test server, not to the bus: every goroutine of the
// code under test is still checked.
func LeakIgnores() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server.(*Server).Start.func1"),
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server.(*fileStore).flushStreamStateLoop"),
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server/ats.Register.func1"),
	}
}
