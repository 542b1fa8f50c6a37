// Package natstest starts private NATS servers for tests.
//
// # Servers
//
// Start runs an embedded nats-server with JetStream enabled, listening on
// a free 127.0.0.1 port and storing its streams in a t.TempDir(). The
// server is shut down by t.Cleanup. Restart stops it and starts a new one
// on the same port and store directory, so clients reconnect by
// themselves and file-backed streams and consumers survive, as they would
// across a real broker restart.
//
// URL returns $BUS_NATS_URL when it is set (a shared server the test must
// not stop) and otherwise the URL of a fresh embedded server.
//
// # Concurrency
//
// A *Server is safe for concurrent use; Shutdown and Restart serialise.
package natstest
