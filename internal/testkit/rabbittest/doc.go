// Package rabbittest starts private RabbitMQ nodes for tests.
//
// # Nodes
//
// [Start] starts a RabbitMQ node in a temporary directory: its own node
// name, AMQP, distribution and epmd ports (free 127.0.0.1 ports below the
// kernel's ephemeral range, and one for the management API with
// [WithManagement]; a new node that exits at start, a port taken before
// it bound it, starts once more on new ports), its own
// data directory (RABBITMQ_MNESIA_BASE), log directory, enabled-plugins
// file, configuration file and HOME (which holds the Erlang cookie), so a
// test never touches a node the machine runs. The harness starts the epmd
// the node registers with, on a free port of its own (ERL_EPMD_PORT), and
// stops it with the node. The node is stopped in t.Cleanup. [Node.Kill] stops it as a crash does (SIGKILL) and
// [Node.Restart] starts it again with its data; [Node.Pause] freezes it
// (SIGSTOP to its process group) and [Node.Resume] lets it run again.
//
// # Clusters
//
// [StartCluster] starts nodes that register with one epmd (the first
// node's) and share an Erlang cookie written to each node's HOME, and
// joins them (stop_app, join_cluster, start_app) into one cluster.
// [Node.SaveRaftMeta] makes a node write its quorum queues' Raft state
// (every dets table: the term, the directory of Raft servers), which
// RabbitMQ writes later on its own, before a test kills it.
//
// # Requirements
//
// The rabbitmq-server script is found in /usr/lib/rabbitmq/bin or on
// PATH, epmd on PATH; `make test` installs them (scripts/setup.sh, Debian
// package rabbitmq-server). A missing binary fails the test rather than
// skipping it, so a CI machine without RabbitMQ cannot pass silently.
// The node runs as the user running the test, root included.
package rabbittest
