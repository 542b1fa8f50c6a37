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
// StartProcess runs a nats-server binary instead ($BUS_NATS_SERVER_BIN,
// nats-server on PATH, or Debian's /usr/sbin/nats-server; skipped when
// there is none), for tests that freeze the server: Process.Pause sends
// SIGSTOP and Process.Resume SIGCONT, which an embedded server cannot
// take.
//
// URL returns $BUS_NATS_URL when it is set (a shared server the test must
// not stop) and otherwise the URL of a fresh embedded server.
//
// # Concurrency
//
// A *Server is safe for concurrent use; Shutdown and Restart serialise.
package natstest
