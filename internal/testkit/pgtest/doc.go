// Package pgtest starts private PostgreSQL servers for tests.
//
// # Servers
//
// [Start] runs initdb in a temporary directory and starts postgres on a
// free 127.0.0.1 port, with its unix socket in that directory, so a test
// never touches a shared server. Durability settings are relaxed for speed
// (fsync off): data survives a crash of the server, not of the machine,
// which is what the tests simulate. The server is stopped in t.Cleanup.
// [Server.Kill] stops it the way a crash does (an immediate shutdown:
// no checkpoint, recovery at the next start) and [Server.Restart] starts
// it again on the same port and data directory. [Server.Pause] freezes
// it (SIGSTOP to the postmaster and to every process under it, found in
// /proc: each backend is a session of its own, so the postmaster's process
// group does not reach them) and [Server.Resume] lets it run again
// (SIGCONT); a frozen server keeps its connections and answers nothing.
//
// # Privileges
//
// initdb and postgres refuse to run as root. When the test runs as root
// the server runs as the operating-system user postgres (which the
// Debian package creates), and the temporary directory is handed to it.
//
// # Requirements
//
// The PostgreSQL server binaries (initdb, postgres) are found with
// `pg_config --bindir`, then in /usr/lib/postgresql/*/bin, then on PATH;
// `make test` installs them (scripts/setup.sh). A missing binary fails the
// test rather than skipping it, so a CI machine that lacks PostgreSQL
// cannot pass silently.
package pgtest
