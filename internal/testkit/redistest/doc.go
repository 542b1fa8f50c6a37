// Package redistest starts private redis-server processes for tests.
//
// # Servers
//
// [Start] launches a redis-server on a free 127.0.0.1 port with its data
// directory in t.TempDir(). Persistence is off (--save "" --appendonly no)
// unless the caller's arguments set those options. The server is stopped in
// t.Cleanup. [Server.Kill] sends SIGKILL, and [Server.Restart] starts the
// server again on the same port and directory, so a server started with
// "--appendonly yes" keeps its data across a kill and restart.
// [Server.Pause] freezes the server (SIGSTOP) and [Server.Resume] lets it
// run again (SIGCONT), for tests of a broker that answers late.
//
// [URL] returns $BUS_REDIS_URL when it is set, otherwise the URL of a private
// server started for the test.
//
// # Cluster
//
// [StartCluster] starts several cluster-enabled servers and joins them into
// one Redis Cluster with redis-cli, waiting until cluster_state is ok.
//
// # Requirements
//
// redis-server and redis-cli must be on PATH; `make test` installs them. A
// missing binary fails the test rather than skipping it, so a CI machine that
// lacks Redis cannot pass silently.
package redistest
